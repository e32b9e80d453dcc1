"""Evaluation protocols: open-set (paper §Evaluation Protocol), closed-set CelebA / UrbanCars, and the report writer.

See REFERENCE.md "Evaluation protocols". Predictions tables follow :mod:`mavias.evaluate.metrics`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import binomtest, false_discovery_control, fisher_exact

from mavias.evaluate.metrics import (
    GROUP_SEPARATOR,
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
from mavias.utils.atomic import atomic_path, write_json

BIASED_TAG_COLUMNS = [
    "class", "tag", "support", "tag_accuracy", "class_accuracy", "lift", "p_value", "contrast", "q_value", "rule",
    "rank", "in_top_k",
]
MAX_P_VALUE = None  # the paper's rule; 0.05 adds the significance filter (see find_biased_tags)
PAPER, ROBUST = "paper", "robust"
BIASED_TAG_RULE = ROBUST
MIN_CONTRAST = 0.05  # robust rule: with-tag accuracy at least 5 points above the class's samples without the tag
MAX_Q_VALUE = 0.05  # robust rule: Benjamini-Hochberg false discovery rate over every (class, tag) tested
BIASED, UNBIASED = "biased", "unbiased"
_TRUE, _FALSE = {"1", "true"}, {"0", "false"}
_URBANCARS_GROUP = ["label", "bg_aligned", "co_aligned"]


def _class_labels(pred: pd.DataFrame, class_names: Sequence[str]) -> np.ndarray:
    """The ``label`` column as int indices, checked to lie in ``range(len(class_names))``."""
    require_columns(pred, ["label"])
    labels = pred["label"].to_numpy()
    if labels.size == 0:
        raise ValueError("the predictions table is empty")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= len(class_names):
        raise ValueError(f"labels must be integer indices into the {len(class_names)} class names")
    return labels


def _as_tag_set(value: object) -> frozenset[str]:
    if isinstance(value, str):
        raise TypeError(f"expected a list of tags per row, got the string {value!r}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return frozenset()
    return frozenset(value)


def _tag_sets(irrelevant_tags: pd.Series, pred: pd.DataFrame) -> pd.Series:
    if not irrelevant_tags.index.equals(pred.index):
        raise ValueError("irrelevant_tags must have the same index as the predictions table (align them first)")
    return irrelevant_tags.map(_as_tag_set)


def find_biased_tags(
    val_pred: pd.DataFrame,
    irrelevant_tags: pd.Series,
    class_names: Sequence[str],
    *,
    min_support: int = MIN_SUPPORT,
    top_k: int = 10,
    max_p_value: float | None = MAX_P_VALUE,
    rule: str = BIASED_TAG_RULE,
) -> pd.DataFrame:
    """B' per class from a vanilla (ERM) model's VALIDATION predictions (paper §Evaluation Protocol, open-set).

    ``rule="robust"`` (default): a tag is biased for class c when at least ``min_support`` validation samples of c
    carry it, the model is at least ``MIN_CONTRAST`` more accurate on them than on c's samples WITHOUT the tag
    (``contrast``), and a one-sided Fisher exact test of that difference survives Benjamini-Hochberg at
    ``MAX_Q_VALUE`` over all (class, tag) pairs tested. Comparing with the samples lacking the tag (not with the
    class overall) is what finds a shortcut under a ~99%-accurate reference: the tag's own accuracy is barely above
    the class's, but the few samples without it are clearly worse; independent noise tags show no such gap.

    ``rule="paper"``: a tag is biased for class c when at least ``min_support`` validation samples of c carry it among their
    irrelevant tags and the model is more accurate on them than on class c overall (lift > 0). With ``max_p_value``
    (off by default: the paper's rule) the lift must also be significant, by a one-sided binomial test of the tag's
    correct count against the class accuracy: at 95% class accuracy 26/26 correct is chance (p = 0.26), and such
    tags shrink the "unbiased" group; with few bias-conflicting validation samples it can leave B' empty. Rows are sorted by class order, then lift desc, support desc, tag;
    ``rank`` counts from 1 within a class and ``in_top_k`` marks rank <= top_k. Every biased tag is kept.
    """
    labels = _class_labels(val_pred, class_names)
    samples = pd.DataFrame({"label": labels, "correct": correctness(val_pred).to_numpy()}, index=val_pred.index)
    per_class = samples.groupby("label")["correct"].agg(class_n="size", class_correct="sum")
    tagged = samples.assign(tag=_tag_sets(irrelevant_tags, val_pred).map(sorted)).explode("tag").dropna(subset=["tag"])
    stats = (
        tagged.groupby(["label", "tag"])["correct"].agg(support="size", tag_correct="sum").reset_index()
        .join(per_class, on="label")
    )
    stats["tag_accuracy"] = stats["tag_correct"] / stats["support"]
    stats["class_accuracy"] = stats["class_correct"] / stats["class_n"]
    stats["lift"] = stats["tag_accuracy"] - stats["class_accuracy"]
    stats["p_value"] = [
        binomtest(int(k), int(n), p, alternative="greater").pvalue if p < 1 else 1.0
        for k, n, p in zip(stats["tag_correct"], stats["support"], stats["class_accuracy"])
    ]
    stats["contrast"], stats["q_value"] = _contrast_test(stats, min_support)
    keep = (stats["lift"] > 0) & (stats["support"] >= min_support)
    if rule == ROBUST:
        keep &= (stats["contrast"] >= MIN_CONTRAST) & (stats["q_value"] <= MAX_Q_VALUE)
    elif rule != PAPER:
        raise ValueError(f"unknown biased-tag rule {rule!r}; use {ROBUST!r} or {PAPER!r}")
    if max_p_value is not None:
        keep &= stats["p_value"] <= max_p_value
    biased = stats[keep].sort_values(
        ["label", "lift", "support", "tag"], ascending=[True, False, False, True]
    )
    biased["class"] = [class_names[label] for label in biased["label"]]
    biased["rule"] = rule
    biased["rank"] = biased.groupby("label").cumcount() + 1
    biased["in_top_k"] = biased["rank"] <= top_k
    return biased[BIASED_TAG_COLUMNS].reset_index(drop=True)


def _contrast_test(stats: pd.DataFrame, min_support: int) -> tuple[pd.Series, pd.Series]:
    """Accuracy with the tag minus without it (within the class) and its BH-adjusted one-sided Fisher p-value;
    NaN / 1 where every sample of the class carries the tag or the support is below ``min_support``."""
    without_n = stats["class_n"] - stats["support"]
    without_correct = stats["class_correct"] - stats["tag_correct"]
    contrast = stats["tag_accuracy"] - without_correct / without_n.where(without_n > 0)
    tested = (stats["support"] >= min_support) & (without_n > 0)
    p_values = pd.Series(1.0, index=stats.index)
    for i in stats.index[tested]:
        table = [[stats.at[i, "tag_correct"], stats.at[i, "support"] - stats.at[i, "tag_correct"]],
                 [without_correct[i], without_n[i] - without_correct[i]]]
        p_values[i] = fisher_exact(table, alternative="greater").pvalue
    q_values = pd.Series(1.0, index=stats.index)
    if tested.any():
        q_values[tested] = false_discovery_control(p_values[tested].to_numpy())
    return contrast, q_values


def biased_tag_recovery(biased: pd.DataFrame, true_tags: Mapping[str, set[str]]) -> dict[str, float]:
    """Precision and recall of B' (rows of :func:`find_biased_tags`) against each class's true shortcut tags."""
    found = set(zip(biased["class"], biased["tag"]))
    truth = {(name, tag) for name, tags in true_tags.items() for tag in tags}
    hits = len(found & truth)
    return {"precision": hits / len(found) if found else float("nan"), "recall": hits / len(truth) if truth else float("nan"),
            "n_found": len(found), "n_true": len(truth)}


def openset_groups(
    pred: pd.DataFrame, irrelevant_tags: pd.Series, biased: pd.DataFrame, class_names: Sequence[str]
) -> pd.Series:
    """``"<class>|biased"`` where a row's irrelevant tags hold at least one of its class's biased tags (every row
    of ``biased``; filter it first to use e.g. only the top-k), else ``"<class>|unbiased"``: up to 2·p groups."""
    require_columns(biased, ["class", "tag"])
    unknown = sorted(set(biased["class"]) - set(class_names))
    if unknown:
        raise ValueError(f"biased tags for unknown class(es) {unknown}")
    biased_by_class = biased.groupby("class")["tag"].agg(frozenset).to_dict()
    names = [class_names[label] for label in _class_labels(pred, class_names)]
    kinds = [
        BIASED if tags & biased_by_class.get(name, frozenset()) else UNBIASED
        for name, tags in zip(names, _tag_sets(irrelevant_tags, pred))
    ]
    return pd.Series([f"{n}{GROUP_SEPARATOR}{k}" for n, k in zip(names, kinds)], index=pred.index, name="group")


def _parse_bool(value: object) -> bool:
    text = str(value).strip().lower()
    if text not in _TRUE | _FALSE:
        raise ValueError(f"cannot read {value!r} as a boolean (use True/False, 1/0, 'true'/'false')")
    return text in _TRUE


def as_bool(values: pd.Series) -> pd.Series:
    """Booleans from bool, 0/1 or "0"/"1"/"true"/"false" values (manifest attributes are strings)."""
    return pd.Series([_parse_bool(v) for v in values], index=values.index, name=values.name, dtype=bool)


def _accuracy_where(pred: pd.DataFrame, rows: pd.Series, what: str) -> float:
    if not rows.any():
        raise ValueError(f"no {what} rows")
    return accuracy(pred[rows])


def bias_conflicting_accuracy(pred: pd.DataFrame, bias_aligned_col: str, *, cell_cols: Sequence[str] = ("label",)) -> float:
    """Mean over the bias-conflicting cells (rows whose ``bias_aligned_col`` is false, grouped by ``cell_cols``) of
    the cell accuracy, as FLAC, BC-BB and the authors' code compute it -- not the accuracy of the pooled rows."""
    require_columns(pred, [bias_aligned_col, *cell_cols])
    conflicting = ~as_bool(pred[bias_aligned_col])
    if not conflicting.any():
        raise ValueError("no bias-conflicting rows")
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
    the test accuracy weighted by them over the groups present; each gap is the pooled accuracy of its test rows
    minus id_accuracy: bg_gap (bg-conflicting, co-aligned), coobj_gap (bg-aligned, co-conflicting), both_gap.
    """
    require_columns(pred, [label_col, bg_aligned_col, co_aligned_col])
    bg, co = as_bool(pred[bg_aligned_col]), as_bool(pred[co_aligned_col])
    cells = pd.DataFrame({"label": pred[label_col], "bg_aligned": bg, "co_aligned": co})
    weights = _urbancars_group_weights(train_proportions, cells["label"].unique())
    id_accuracy = average_accuracy(pred, group_key(cells, _URBANCARS_GROUP), weights)["weighted"]
    return {
        "id_accuracy": id_accuracy,
        "bg_gap": _accuracy_where(pred, ~bg & co, "bg-conflicting, co-aligned") - id_accuracy,
        "coobj_gap": _accuracy_where(pred, bg & ~co, "bg-aligned, co-conflicting") - id_accuracy,
        "both_gap": _accuracy_where(pred, ~bg & ~co, "bg- and co-conflicting") - id_accuracy,
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


def openset_evaluation(
    val_pred: pd.DataFrame,
    val_irrelevant_tags: pd.Series,
    test_pred: pd.DataFrame,
    test_irrelevant_tags: pd.Series,
    class_names: Sequence[str],
    *,
    tag_min_support: int = MIN_SUPPORT,
    top_k: int = 10,
    min_support: int = MIN_SUPPORT,
    max_p_value: float | None = MAX_P_VALUE,
    rule: str = BIASED_TAG_RULE,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """Open-set protocol end to end: B' from the vanilla model's validation predictions, then 2·p groups on the
    evaluated model's test predictions. Returns (metrics, group table, biased tags); validation and test must not
    share a ``sample_id``."""
    require_columns(val_pred, ["sample_id"])
    require_columns(test_pred, ["sample_id"])
    shared = set(val_pred["sample_id"]) & set(test_pred["sample_id"])
    if shared:
        raise ValueError(f"{len(shared)} sample(s) are in both the validation and the test predictions")
    biased = find_biased_tags(
        val_pred, val_irrelevant_tags, class_names, min_support=tag_min_support, top_k=top_k, max_p_value=max_p_value,
        rule=rule,
    )
    groups = openset_groups(test_pred, test_irrelevant_tags, biased, class_names)
    metrics, table = evaluation_report(test_pred, groups, min_support=min_support, n_boot=n_boot, seed=seed)
    metrics.update(protocol="open-set", tag_min_support=tag_min_support, n_biased_tags=len(biased), biased_tag_rule=rule)
    return metrics, table, biased


def write_evaluation(
    out_dir: str | Path, metrics: dict, groups: pd.DataFrame, biased_tags: pd.DataFrame | None = None
) -> Path:
    """Write ``groups.csv`` (and ``biased_tags.csv``), then ``metrics.json`` last, each atomically.

    Metrics must be strict JSON (no NaN, no numpy scalars): checked before anything is written.
    """
    json.dumps(metrics, allow_nan=False)
    out_dir = Path(out_dir)
    tables = {"groups.csv": groups} | ({} if biased_tags is None else {"biased_tags.csv": biased_tags})
    for name, table in tables.items():
        with atomic_path(out_dir / name) as tmp:
            table.to_csv(tmp, index=False)
    write_json(out_dir / "metrics.json", metrics)
    return out_dir
