"""The open-set protocol (paper §Evaluation Protocol): groups formed by the biased tags B' of each class.

Per class c: ``"<c>|aligned"`` (class-c samples carrying at least one of c's biased tags), ``"<c>|conflicting"``
(class-c samples carrying none: the paper's 2·p groups) and, where the evaluation set has them, ``"<c>|decoys"``:
samples of other classes that carry one of c's biased tags, where a model that follows c's shortcut fails. A decoy
also belongs to its own class's group, so the groups overlap; each group's accuracy, its bootstrap interval and the
averages are taken over the group's own samples.

B' itself comes from :mod:`mavias.core.evaluate.shortcuts` (default, label-free) or from the paper's rule here
(:func:`find_biased_tags`): a tag is biased for class c when at least ``min_support`` validation samples of c carry it
and the vanilla model is more accurate on them than on class c overall (lift > 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from mavias.core.evaluate.dataset_metrics import evaluation_report
from mavias.core.evaluate.metrics import GROUP_SEPARATOR, MIN_SUPPORT, accuracy, correctness, require_columns

PAPER = "paper"
ALIGNED, CONFLICTING, DECOYS = "aligned", "conflicting", "decoys"
PAPER_TAG_COLUMNS = ["class", "tag", "support", "tag_accuracy", "class_accuracy", "lift", "p_value", "rule", "rank",
                     "in_top_k"]


def class_labels(pred: pd.DataFrame, class_names: Sequence[str]) -> np.ndarray:
    """The ``label`` column as int indices, checked to lie in ``range(len(class_names))``."""
    require_columns(pred, ["label"])
    labels = pred["label"].to_numpy()
    if labels.size == 0:
        raise ValueError("the predictions table is empty")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= len(class_names):
        raise ValueError(f"labels must be integer indices into the {len(class_names)} class names")
    return labels


def as_tag_set(value: object) -> frozenset[str]:
    if isinstance(value, str):
        raise TypeError(f"expected a list of tags per row, got the string {value!r}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return frozenset()
    return frozenset(value)


def _tag_sets(tags: pd.Series, pred: pd.DataFrame) -> pd.Series:
    if not tags.index.equals(pred.index):
        raise ValueError("the tags must have the same index as the predictions table (align them first)")
    return tags.map(as_tag_set)


def find_biased_tags(val_pred: pd.DataFrame, irrelevant_tags: pd.Series, class_names: Sequence[str], *,
                     min_support: int = MIN_SUPPORT, top_k: int = 10) -> pd.DataFrame:
    """B' by the paper's rule from a vanilla model's VALIDATION predictions: lift of the accuracy on the samples of c
    carrying the tag over c's accuracy, support >= ``min_support`` (``p_value``, reported beside it: a one-sided
    binomial test of the tag's correct count against the class accuracy). Rows are sorted by class order, then lift
    desc, support desc, tag; ``rank`` counts from 1 within a class."""
    labels = class_labels(val_pred, class_names)
    samples = pd.DataFrame({"label": labels, "correct": correctness(val_pred).to_numpy()}, index=val_pred.index)
    per_class = samples.groupby("label")["correct"].agg(class_n="size", class_correct="sum")
    tagged = samples.assign(tag=_tag_sets(irrelevant_tags, val_pred).map(sorted)).explode("tag").dropna(subset=["tag"])
    stats = (tagged.groupby(["label", "tag"])["correct"].agg(support="size", tag_correct="sum").reset_index()
             .join(per_class, on="label"))
    stats["tag_accuracy"] = stats["tag_correct"] / stats["support"]
    stats["class_accuracy"] = stats["class_correct"] / stats["class_n"]
    stats["lift"] = stats["tag_accuracy"] - stats["class_accuracy"]
    stats["p_value"] = [binomtest(int(k), int(n), p, alternative="greater").pvalue if p < 1 else 1.0
                        for k, n, p in zip(stats["tag_correct"], stats["support"], stats["class_accuracy"])]
    keep = (stats["lift"] > 0) & (stats["support"] >= min_support)
    biased = stats[keep].sort_values(["label", "lift", "support", "tag"], ascending=[True, False, False, True])
    biased["class"] = [class_names[label] for label in biased["label"]]
    biased["rule"] = PAPER
    biased["rank"] = biased.groupby("label").cumcount() + 1
    biased["in_top_k"] = biased["rank"] <= top_k
    return biased[PAPER_TAG_COLUMNS].reset_index(drop=True)


def biased_tag_recovery(biased: pd.DataFrame, true_tags: dict[str, set[str]]) -> dict[str, float]:
    """Precision and recall of B' (rows with ``class``, ``tag``) against each class's true shortcut tags."""
    found = set(zip(biased["class"], biased["tag"]))
    truth = {(name, tag) for name, tags in true_tags.items() for tag in tags}
    hits = len(found & truth)
    return {"precision": hits / len(found) if found else float("nan"),
            "recall": hits / len(truth) if truth else float("nan"), "n_found": len(found), "n_true": len(truth)}


def _biased_by_class(biased: pd.DataFrame, class_names: Sequence[str]) -> dict[str, frozenset[str]]:
    require_columns(biased, ["class", "tag"])
    unknown = sorted(set(biased["class"]) - set(class_names))
    if unknown:
        raise ValueError(f"biased tags for unknown class(es) {unknown}")
    return biased.groupby("class")["tag"].agg(frozenset).to_dict()


def openset_groups(pred: pd.DataFrame, irrelevant_tags: pd.Series, biased: pd.DataFrame,
                   class_names: Sequence[str]) -> pd.Series:
    """``"<class>|aligned"`` where a row's irrelevant tags hold at least one of its class's biased tags, else
    ``"<class>|conflicting"``: the paper's 2·p disjoint groups."""
    by_class = _biased_by_class(biased, class_names)
    names = [class_names[label] for label in class_labels(pred, class_names)]
    kinds = [ALIGNED if tags & by_class.get(name, frozenset()) else CONFLICTING
             for name, tags in zip(names, _tag_sets(irrelevant_tags, pred))]
    return pd.Series([f"{n}{GROUP_SEPARATOR}{k}" for n, k in zip(names, kinds)], index=pred.index, name="group")


def decoy_groups(pred: pd.DataFrame, sample_tags: pd.Series, biased: pd.DataFrame,
                 class_names: Sequence[str]) -> pd.Series:
    """``"<c>|decoys"`` for every row of another class that carries one of c's biased tags (a row may be a decoy of
    several classes: one entry each, indexed by the row)."""
    by_class = _biased_by_class(biased, class_names)
    names = [class_names[label] for label in class_labels(pred, class_names)]
    entries = [(index, f"{c}{GROUP_SEPARATOR}{DECOYS}")
               for index, name, tags in zip(pred.index, names, _tag_sets(sample_tags, pred))
               for c, shortcut in by_class.items() if c != name and tags & shortcut]
    return pd.Series([g for _, g in entries], index=[i for i, _ in entries], name="group", dtype=object)


def openset_report(pred: pd.DataFrame, irrelevant_tags: pd.Series, sample_tags: pd.Series | None,
                   biased: pd.DataFrame, class_names: Sequence[str], **report) -> tuple[dict, pd.DataFrame]:
    """Metrics and group table over the aligned, conflicting and (with ``sample_tags``) decoy groups; ``empty_groups``
    names the 2·p groups without a sample (a class whose every sample is aligned has no conflicting group to take the
    minimum over, and the worst group looks better than the model is)."""
    groups = openset_groups(pred, irrelevant_tags, biased, class_names)
    expected = {f"{name}{GROUP_SEPARATOR}{CONFLICTING}" for name in class_names} | {
        f"{name}{GROUP_SEPARATOR}{ALIGNED}" for name in _biased_by_class(biased, class_names)}
    if sample_tags is not None:
        groups = pd.concat([groups, decoy_groups(pred, sample_tags, biased, class_names)])
    rows = pred.loc[groups.index].reset_index(drop=True).assign(group=groups.to_numpy())
    metrics, table = evaluation_report(rows, "group", **report)
    metrics.update(n_samples=len(pred), accuracy=accuracy(pred), n_decoy_rows=int(groups.str.endswith(DECOYS).sum()),
                   empty_groups=sorted(expected - set(groups)))
    return metrics, table
