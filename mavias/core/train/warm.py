"""Warm starts: a training that starts from the main model of an earlier one (same backbone and classes) on data
that grew, for a share of a cold training's steps."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mavias.core.train.checkpoints import main_model_weights
from mavias.core.train.config import TrainConfig
from mavias.errors import UserError
from mavias.utils.torchfile import TORCH_LOAD_ERRORS, load_error_reason

if TYPE_CHECKING:
    from mavias.core.train.model import MainModel


@dataclass(frozen=True)
class WarmStart:
    checkpoint: Path  # a best_*.pt or last.pt whose main model starts the training
    fraction: float  # of a cold training's steps
    # An ERM reference's early, bias-amplified proxy (``early.pt``) to keep: a warm run has none of its own
    proxy: Path | None = None

    def apply(self, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` starting from the checkpoint, for ``fraction`` of the epochs it would train cold: of its explicit
        epochs, else of those its recipe chooses (after the recipe's bounds)."""
        if cfg.epochs is not None:
            return cfg.model_copy(update={"init_from": str(self.checkpoint),
                                          "epochs": max(1, math.ceil(cfg.epochs * self.fraction))})
        return cfg.model_copy(update={"init_from": str(self.checkpoint), "length_share": self.fraction})


def warm_fraction(new: int, old: int, replay: float) -> float:
    """The share of a cold training's steps a warm one trains: the new samples' share plus ``replay`` of the old
    ones' (batches still drawn from all of them)."""
    return min(1.0, (new + replay * old) / max(new + old, 1))


INIT_FROM_HINT = "point init_from at a run's best_*.pt or last.pt, or unset it to train from scratch"


def load_initial_weights(model: MainModel, checkpoint: str | Path, classes: list[str]) -> None:
    """Start ``model`` from the main model of ``checkpoint``; another class list or architecture is a user error."""
    import torch  # here, not above: the night's light tasks plan warm starts without torch

    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except TORCH_LOAD_ERRORS as err:
        raise UserError(f"cannot read the warm-start checkpoint {checkpoint} ({load_error_reason(err)})",
                        hint=INIT_FROM_HINT) from None
    if not isinstance(state, dict) or "classes" not in state:
        raise UserError(f"the warm-start checkpoint {checkpoint} is not a checkpoint written by `mavias train`",
                        hint=INIT_FROM_HINT)
    if list(state["classes"]) != list(classes):
        raise UserError(f"the warm-start checkpoint {checkpoint} was trained on the classes {state['classes']}, "
                        f"this training has {classes}", hint="unset init_from to train from scratch")
    try:
        model.load_state_dict(main_model_weights(state))
    except RuntimeError:
        raise UserError(f"the warm-start checkpoint {checkpoint} holds another architecture than "
                        f"{model.__class__.__name__} of this config's backbone",
                        hint="use the backbone it was trained with, or unset init_from") from None
