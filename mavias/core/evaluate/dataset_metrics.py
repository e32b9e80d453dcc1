"""Closed-set evaluation protocols (CelebA, Waterbirds, UrbanCars, ImageNet-9), the group report and its writer.

The open-set protocol is :mod:`mavias.core.evaluate.openset`. Predictions tables follow :mod:`mavias.core.evaluate.metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from mavias.core.evaluate.metrics import (
    MIN_SUPPORT,
    Groups,
    accuracy,
    average_accuracy,
    correctness,
    format_group_key,
    group_key,
    group_table,
    require_columns,
    worst_group,
)
from mavias.errors import UserError

_TRUE, _FALSE = {"1", "true"}, {"0", "false"}
_URBANCARS_GROUP = ["label", "bg_aligned", "co_aligned"]


class AttributeValueError(UserError, ValueError):
    """An alignment attribute (``bg_aligned``, a bias-aligned flag) that is not a boolean."""


def _parse_bool(value: object) -> bool:
    text = str(value).strip().lower()
    if text not in _TRUE | _FALSE:
        raise AttributeValueError(f"cannot read {value!r} as an alignment flag",
                                  hint="write the manifest's alignment attributes as 1/0 or true/false")
    return text in _TRUE


def as_bool(values: pd.Series) -> pd.Series:
    """Booleans from bool, 0/1 or "0"/"1"/"true"/"false" values (manifest attributes are strings)."""
    return pd.Series([_parse_bool(v) for v in values], index=values.index, name=values.name, dtype=bool)


def _cell_mean_accuracy(pred: pd.DataFrame, cells: pd.DataFrame, rows: pd.Series) -> float:
    """Mean over the classes of the accuracy of ``rows`` within each class; NaN where the split has no such row."""
    if not rows.any():
        return float("nan")
    return float(correctness(pred[rows]).groupby(cells.loc[rows, "label"]).mean().mean())


def bias_conflicting_accuracy(pred: pd.DataFrame, bias_aligned_col: str, *, cell_cols: Sequence[str] = ("label",)) -> float:
    """Mean over the bias-conflicting cells (rows whose ``bias_aligned_col`` is false, grouped by ``cell_cols``) of
    the cell accuracy, as FLAC, BC-BB and the authors' code compute it -- not the accuracy of the pooled rows."""
    require_columns(pred, [bias_aligned_col, *cell_cols])
    conflicting = ~as_bool(pred[bias_aligned_col])
    if not conflicting.any():
        return float("nan")  # the split has none: nothing to measure
    rows = pred[conflicting]
    return average_accuracy(rows, group_key(rows, list(cell_cols)))["unweighted"]


def celeba_metrics(pred: pd.DataFrame, bias_col: str, aligned: Mapping[object, object], *, label_col: str = "label") -> dict:
    """CelebA closed-set metrics over the (label, bias attribute) cells.

    ``aligned`` maps each label to its bias-aligned attribute value (the training majority, e.g. blond -> female).
    unbiased_accuracy = mean over all cells; bias_conflicting_accuracy = mean over the cells whose value is not the
    aligned one; cell_accuracy lists every cell.
    """
    require_columns(pred, [label_col, bias_col])
    flags = pd.Series([str(aligned.get(lbl)) == str(v) for lbl, v in zip(pred[label_col], pred[bias_col])], index=pred.index)
    cells = group_key(pred, [label_col, bias_col])
    return {
        "unbiased_accuracy": unbiased_accuracy(pred, label_col, bias_col),
        "bias_conflicting_accuracy": bias_conflicting_accuracy(pred.assign(_aligned=flags), "_aligned",
                                                               cell_cols=[label_col, bias_col]),
        "cell_accuracy": correctness(pred).groupby(cells).mean().to_dict(),
    }


def imagenet9_metrics(variant_accuracy: Mapping[str, float]) -> dict:
    """Per-variant accuracy of the backgrounds challenge and BG-gap = mixed_same - mixed_rand (when both exist)."""
    metrics: dict = {"variant_accuracy": dict(variant_accuracy)}
    if {"mixed_same", "mixed_rand"} <= set(variant_accuracy):
        metrics["bg_gap"] = variant_accuracy["mixed_same"] - variant_accuracy["mixed_rand"]
    return metrics


def unbiased_accuracy(pred: pd.DataFrame, label_col: str, bias_col: str) -> float:
    """Mean over the (label, bias) cells present of the cell accuracy (CelebA closed-set "unbiased")."""
    return average_accuracy(pred, group_key(pred, [label_col, bias_col]))["unweighted"]


def _urbancars_group_weights(train_proportions: Mapping[tuple, float], labels: Sequence[object]) -> dict[str, float]:
    """Group key -> weight; (bg_aligned, co_aligned) keys apply to every label."""
    weights = {}
    for key, weight in train_proportions.items():
        if len(key) not in (2, 3):
            raise ValueError(f"keys are (bg_aligned, co_aligned) or (label, bg_aligned, co_aligned), not {key!r}")
        for label, bg, co in [tuple(key)] if len(key) == 3 else [(label, *key) for label in labels]:
            weights[format_group_key((label, _parse_bool(bg), _parse_bool(co)), _URBANCARS_GROUP)] = float(weight)
    return weights


def urbancars_metrics(
    pred: pd.DataFrame,
    bg_aligned_col: str,
    co_aligned_col: str,
    train_proportions: Mapping[tuple, float],
    *,
    label_col: str = "label",
) -> dict[str, float]:
    """UrbanCars I.D. accuracy and signed gaps (negative = worse than I.D.; the paper reports their magnitudes).

    Groups are (label, bg_aligned, co_aligned). ``train_proportions`` maps either (label, bg_aligned, co_aligned)
    or (bg_aligned, co_aligned) -- the same for every class -- to training proportions or counts. id_accuracy is
    the test accuracy weighted by them over the groups present; each gap is the accuracy of its rows, averaged over
    the classes' cells as the UrbanCars authors' code does (not pooled), minus id_accuracy: bg_gap (bg-conflicting,
    co-aligned), coobj_gap (bg-aligned, co-conflicting), both_gap; NaN where the split has no row of its cells.
    """
    require_columns(pred, [label_col, bg_aligned_col, co_aligned_col])
    bg, co = as_bool(pred[bg_aligned_col]), as_bool(pred[co_aligned_col])
    cells = pd.DataFrame({"label": pred[label_col], "bg_aligned": bg, "co_aligned": co})
    weights = _urbancars_group_weights(train_proportions, cells["label"].unique())
    id_accuracy = average_accuracy(pred, group_key(cells, _URBANCARS_GROUP), weights)["weighted"]
    return {
        "id_accuracy": id_accuracy,
        "bg_gap": _cell_mean_accuracy(pred, cells, ~bg & co) - id_accuracy,
        "coobj_gap": _cell_mean_accuracy(pred, cells, bg & ~co) - id_accuracy,
        "both_gap": _cell_mean_accuracy(pred, cells, ~bg & ~co) - id_accuracy,
    }


def evaluation_report(
    pred: pd.DataFrame,
    group_col: Groups,
    *,
    train_proportions: Mapping[str, float] | None = None,
    min_support: int = MIN_SUPPORT,
    n_boot: int = 1000,
    seed: int = 0,
    include_small: bool = True,
) -> tuple[dict, pd.DataFrame]:
    """A flat JSON-serialisable metrics dict (overall, worst group with CI, averages, small groups) and the group
    table."""
    table = group_table(pred, group_col, train_proportions=train_proportions, min_support=min_support)
    worst = worst_group(pred, group_col, n_boot=n_boot, seed=seed, min_support=min_support, include_small=include_small)
    averages = average_accuracy(pred, group_col, train_proportions)
    metrics = {
        "n_samples": len(pred),
        "accuracy": accuracy(pred),
        "n_groups": len(table),
        "min_support": min_support,
        "small_groups": [str(g) for g in table.loc[table["small"], "group"]],
        "worst_group": worst.group,
        "worst_group_accuracy": worst.accuracy,
        "worst_group_ci_low": worst.ci_low,
        "worst_group_ci_high": worst.ci_high,
        "worst_group_n": worst.n,
        "worst_group_small": worst.small,
        "worst_group_includes_small": include_small,
        "n_boot": n_boot,
        "seed": seed,
        "average_accuracy": averages["unweighted"],
        "weighted_average_accuracy": averages["weighted"],
    }
    return metrics, table

