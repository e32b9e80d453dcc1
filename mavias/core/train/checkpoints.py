"""A run folder's checkpoints: which file holds what, and the main model rebuilt from one (backbone + head, never
the bias projection)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from mavias.core.train.config import TrainConfig
from mavias.errors import UserError, describe_validation_error

if TYPE_CHECKING:
    import torch

    from mavias.core.train.model import MainModel

CRITERIA = ("val_acc", "val_tag_wg", "val_robust", "val_true_wg")
EARLY_CHECKPOINT = "early.pt"


def best_checkpoint(run: Path, criterion: str) -> Path:
    """The checkpoint a run keeps for a selection criterion (``best_<criterion>.pt``); the one place that names it."""
    if criterion not in CRITERIA:
        raise UserError(f"unknown criterion {criterion!r}", hint=f"use one of {', '.join(CRITERIA)}")
    return Path(run) / f"best_{criterion}.pt"


def early_epoch(epochs: int) -> int:
    """The epoch kept as ``early.pt``: the first twentieth of the run. An early-stopped ERM leans on shortcuts more
    openly than the final model (a bias-amplified proxy for the audit, :mod:`mavias.core.evaluate.shortcuts`)."""
    return max(1, epochs // 20)


def epoch_path(run: Path, epoch: int) -> Path:
    """The main model after ``epoch`` in a run trained with ``keep_epochs``."""
    return Path(run) / "epochs" / f"epoch_{epoch:03d}.pt"


class CheckpointError(UserError, ValueError):
    """A file that is not a checkpoint this version of mavias can rebuild a model from."""


NOT_A_CHECKPOINT_HINT = "pass a run's best_*.pt or last.pt (or the run folder with --run)"


def load_main_model(checkpoint: str | Path, *, device: str = "cpu") -> tuple[MainModel, list[str], TrainConfig]:
    """Rebuild the main model (backbone + head, no projection) from a best_*.pt or last.pt checkpoint."""
    import torch  # here, not above: the night's light tasks read this module's file names without torch

    from mavias.core.train.model import build_main_model

    try:
        state = torch.load(checkpoint, map_location=device, weights_only=True)
    except OSError:
        raise  # a missing or unreadable file keeps its own message
    except Exception as err:  # noqa: BLE001 - torch's unpicklers fail on a file of another kind in many ways
        raise CheckpointError(f"{checkpoint} is not a checkpoint written by `mavias train` ({type(err).__name__})",
                              hint=NOT_A_CHECKPOINT_HINT) from err
    if not isinstance(state, dict) or "config" not in state or "classes" not in state:
        raise CheckpointError(f"{checkpoint} is not a checkpoint written by `mavias train` (no config or classes)",
                              hint=NOT_A_CHECKPOINT_HINT)
    try:
        cfg = TrainConfig.model_validate(state["config"])
    except ValidationError as err:
        raise CheckpointError(describe_validation_error(err, what=f"settings in {checkpoint}", show_input=False),
                              hint="it was written by another version of mavias: train it again with this one"
                              ) from err
    weights = main_model_weights(state)
    in_channels = 3 if cfg.backbone.name != "mlp" else weights["backbone.0.weight"].shape[1]
    model = build_main_model(cfg.backbone, in_channels, len(state["classes"]))
    model.load_state_dict(weights)
    return model.to(device).eval(), list(state["classes"]), cfg


def main_model_weights(state: dict) -> dict[str, torch.Tensor]:
    """The main model's weights in a loaded checkpoint: ``model`` of a best_*.pt, ``modules.model`` of a last.pt."""
    return state["model"] if "model" in state else state["modules"]["model"]
