"""Checks that keep a failed training from passing silently: a diverging loss stops it with what to change, and a
model no better than the majority class or a single attribute is flagged loudly."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from mavias.core.evaluate.metrics import ATTRIBUTE_PREFIX
from mavias.errors import UserError

log = logging.getLogger(__name__)
MARGIN = 0.02  # a model within 2 points of what a trivial rule explains has learned nothing beyond it


class TrainingDiverged(UserError):
    """The loss became NaN or infinite; the checkpoints of the epochs before it are kept."""


def check_finite(loss: float, epoch: int, lr: float) -> None:
    if not np.isfinite(loss):
        raise _diverged(f"training diverged in epoch {epoch} (loss {loss})", lr)


def check_finite_weights(finite: bool, epoch: int, lr: float) -> None:
    """After an epoch's last step, whose loss was finite: weights it made NaN or infinite are never validated or
    saved."""
    if not finite:
        raise _diverged(f"training diverged at the end of epoch {epoch} (weights NaN or infinite)", lr)


def _diverged(what: str, lr: float) -> TrainingDiverged:
    return TrainingDiverged(f"{what} at learning rate {lr:.3g}; the checkpoints of the earlier epochs are kept. Lower "
                            f"optim.lr (e.g. --set optim.lr={lr / 10:.2g}), or leave it unset so a range test chooses "
                            "it, and train into a new --out folder")


def divergence(error: TrainingDiverged) -> str:
    """What diverged, without the advice for a single run (a search stops the trial and goes on)."""
    return str(error).split(";")[0]


def trivial_rates(val: pd.DataFrame) -> dict[str, float]:
    """Validation accuracy of trivial rules: always the majority class, and the majority class of each value of
    one ``attr_*`` attribute (where the data has attributes)."""
    labels = val["label"].astype(str)
    rates = {"majority class": float(labels.value_counts(normalize=True).iloc[0])}
    for column in (c for c in val.columns if c.startswith(ATTRIBUTE_PREFIX)):
        values = val[column].astype(str)
        predicted = labels.groupby(values).agg(lambda part: part.value_counts().index[0])
        rates[f"attribute {column.removeprefix(ATTRIBUTE_PREFIX)}"] = float((values.map(predicted) == labels).mean())
    return rates


def chance_warnings(best_val_acc: float, balanced_acc: float, n_classes: int, val: pd.DataFrame) -> list[str]:
    """What to warn about a finished training whose best validation accuracy a trivial rule explains."""
    warnings = []
    if balanced_acc <= 1.0 / n_classes + MARGIN:
        warnings.append(f"balanced validation accuracy {balanced_acc:.3f} is chance ({1 / n_classes:.3f}): the model "
                        "learned nothing; try more epochs, another learning rate (leave optim.lr unset for a range "
                        "test) or check the labels")
    for rule, rate in trivial_rates(val).items():
        if best_val_acc <= rate + MARGIN:
            warnings.append(f"validation accuracy {best_val_acc:.3f} is no better than the {rule} alone ({rate:.3f}): "
                            "the model may have learned only that; train longer or with another learning rate, and "
                            "look at the bias-conflicting groups before using it")
    for warning in warnings:
        log.warning("%s", warning)
    return warnings
