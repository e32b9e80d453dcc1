"""Bias-unaware model selection on validation predictions that does not collapse on tiny tag-derived groups.

``val_robust`` = ½ · balanced class accuracy + ½ · mean over classes of the class's worst tag-derived group
accuracy, each group's accuracy shrunk toward its class accuracy by ``PRIOR_STRENGTH`` pseudo-samples; groups
smaller than ``MIN_GROUP_SUPPORT`` are pooled, and a pool still that small counts only through its class accuracy.

Why not the plain worst group (``val_tag_wg``): with a 95%-aligned validation split some "<class>|conflicting" group
holds 1–3 images, often all wrong, and the minimum is 0.0 at every epoch: it selects nothing. Shrinkage keeps a
small group's estimate near its class until the group has evidence, pooling stops a single image from forming a
group, and averaging over classes (instead of one minimum) lets every class's bias-conflicting samples count.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

MIN_GROUP_SUPPORT = 5
PRIOR_STRENGTH = 10.0
CONSTANT_TOLERANCE = 1e-9
POOLED = "<pooled>"


def robust_selection_score(
    correct: Sequence[bool] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    groups: Sequence[str] | np.ndarray | None = None,
    *,
    min_support: int = MIN_GROUP_SUPPORT,
    prior_strength: float = PRIOR_STRENGTH,
) -> float:
    """The ``val_robust`` score in [0, 1] (see the module docstring); without groups it is the balanced accuracy."""
    correct = np.asarray(correct, dtype=float)
    labels = np.asarray(labels)
    if correct.shape != labels.shape:
        raise ValueError(f"correct has {correct.shape} values, labels {labels.shape}")
    if correct.size == 0:
        raise ValueError("no validation samples to select a model on")
    frame = pd.DataFrame({"correct": correct, "label": labels})
    frame["group"] = POOLED if groups is None else np.asarray(groups, dtype=object)
    class_acc = frame.groupby("label")["correct"].mean()
    worst = [
        _worst_shrunk_group(part, class_acc[label], min_support, prior_strength)
        for label, part in frame.groupby("label")
    ]
    return float(0.5 * class_acc.mean() + 0.5 * np.mean(worst))


def validation_scores(correct: np.ndarray, labels: np.ndarray, tag_groups: np.ndarray | None,
                      true_groups: np.ndarray | None) -> dict[str, float]:
    """An epoch's selection criteria from its validation correctness: ``val_acc``, ``val_balanced``, ``val_robust``,
    and with the reference's tag groups ``val_tag_wg``, with the true groups ``val_true_wg`` (the oracle's, recorded
    for every run)."""
    frame = pd.Series(correct)
    scores = {"val_acc": float(correct.mean()), "val_balanced": float(frame.groupby(labels).mean().mean()),
              "val_robust": robust_selection_score(correct, labels, tag_groups)}
    if tag_groups is not None:
        scores["val_tag_wg"] = float(frame.groupby(tag_groups).mean().min())
    if true_groups is not None:
        scores["val_true_wg"] = float(frame.groupby(true_groups).mean().min())
    return scores


def _worst_shrunk_group(part: pd.DataFrame, class_acc: float, min_support: int, prior_strength: float) -> float:
    sizes = part["group"].map(part["group"].value_counts())
    pooled = part["group"].where(sizes >= min_support, POOLED)
    stats = part.groupby(pooled)["correct"].agg(["sum", "size"])
    stats = stats[stats["size"] >= min_support]
    if stats.empty:
        return float(class_acc)
    shrunk = (stats["sum"] + prior_strength * class_acc) / (stats["size"] + prior_strength)
    return float(shrunk.min())


def selection_key(score: float, val_acc: float) -> tuple[float, float]:
    """Ties of a worst-group score (frequent: small groups give few distinct values) go to the higher val accuracy:
    between a run's epochs and between a search's trials."""
    return (score, val_acc)


def is_perfect(scores: Sequence[tuple[float, float]]) -> bool:
    """A perfect selection score and val accuracy: no later validation can beat it."""
    return max(scores, default=(0.0, 0.0)) >= selection_key(1.0, 1.0)


def is_uninformative(scores: Sequence[float]) -> bool:
    """True when a criterion did not vary over the epochs (it cannot tell checkpoints apart)."""
    values = np.asarray(scores, dtype=float)
    return values.size == 0 or bool(np.ptp(values) <= CONSTANT_TOLERANCE)
