"""Why each class has the shortcuts it has in B', or none: one line per class, from the evidence table of
:func:`mavias.core.evaluate.shortcuts.find_shortcuts` and the training split's tags.

Statuses, the first that applies:

- ``shortcuts``: at least one (class, tag) pair is in B';
- ``no_irrelevant_tags``: no training image of the class carries a tag judged irrelevant to it: nothing to test;
- ``too_few_samples``: no irrelevant tag reaches ``min_support`` training images of the class;
- ``not_associated``: no tested tag is more frequent in the class than in the others by a shortcut's margin;
- ``no_validation_samples``: the associated tags have no validation images to measure reliance on;
- ``reference_too_weak``: the reference is less accurate on the class's validation images than halfway between
  chance and perfect, so it learned neither the class nor a shortcut worth measuring;
- ``cannot_decide``: too few images to measure the reference's reliance on an associated tag (see
  :mod:`mavias.core.evaluate.shortcuts`): "not relied on" would claim what the data cannot show;
- ``not_relied_on``: the reference does not lean on the associated tags.

A class with no image in the evaluation set is flagged besides (``n_eval`` 0): its groups are not measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from mavias.core.evaluate.shortcuts import (
    MIN_ODDS_RATIO,
    as_flag,
    is_associated,
    is_undecided,
    pair_counts,
    unmeasured,
)

STATUS_COLUMNS = ["class", "status", "reason", "n_shortcuts", "shortcuts", "n_train", "top_tag", "top_support",
                  "n_tested", "n_associated", "reference_accuracy", "n_eval"]


def _top_irrelevant(labels: np.ndarray, irrelevant: pd.Series, n_classes: int) -> dict[int, tuple[str, int]]:
    """Per class index: its most frequent irrelevant tag on training images and how many carry it."""
    top = pair_counts(labels, irrelevant).drop_duplicates("label")
    found = {int(row.label): (str(row.tag), int(row.n)) for row in top.itertuples()}
    return {k: found.get(k, ("", 0)) for k in range(n_classes)}


def _reason(row: dict, min_support: int, chance: float) -> tuple[str, str]:
    accuracy = row["reference_accuracy"]
    if row["n_shortcuts"]:
        return "shortcuts", f"{row['n_shortcuts']} shortcut(s): {row['shortcuts']}"
    if not row["top_tag"]:
        return "no_irrelevant_tags", ("no training image carries a tag judged irrelevant to this class, so nothing "
                                      "can be a shortcut (check the judge's decisions for it)")
    if row["n_tested"] == 0:
        return "too_few_samples", (f"too few samples: its most frequent irrelevant tag '{row['top_tag']}' is on "
                                   f"{row['top_support']} training image(s), fewer than the {min_support} needed")
    if row["n_associated"] == 0:
        return "not_associated", (f"none of its {row['n_tested']} tested irrelevant tag(s) is more frequent in this "
                                  f"class than in the others by a shortcut's margin (odds ratio {MIN_ODDS_RATIO})")
    if row["measured"] == 0:
        return "no_validation_samples", "its associated tags have no validation images to measure reliance on"
    if accuracy is not None and not np.isnan(accuracy) and accuracy < (chance + 1) / 2:
        return "reference_too_weak", (f"reference too weak: it is {accuracy:.0%} accurate on this class's validation "
                                      f"images (chance {chance:.0%}), so its reliance on a tag says nothing; it needs "
                                      "more data or training")
    if row["undecided"]:
        return "cannot_decide", (f"cannot decide: {row['undecided']} associated tag(s) ({row['undecided_tags']}) have "
                                 "too few images to measure the reference's reliance on them; collect more images "
                                 "of the class, with and without them")
    return "not_relied_on", (f"the reference does not lean on its {row['n_associated']} associated tag(s) as "
                             "shortcuts: they co-occur with the class, but it takes them as evidence for the class "
                             "neither on the class's own images nor on other classes' (each tag's reason: "
                             "shortcut_evidence.csv)")


def class_status(class_names: Sequence[str], train_labels: np.ndarray, train_irrelevant: pd.Series,
                 evidence: pd.DataFrame, *, min_support: int,
                 reference_accuracy: Mapping[str, float] | None = None,
                 eval_counts: Mapping[str, int] | None = None) -> pd.DataFrame:
    """One row per class (``STATUS_COLUMNS``): its status and the reason in one line."""
    labels = np.asarray(train_labels)
    top = _top_irrelevant(labels, train_irrelevant, len(class_names))
    evidence = evidence.assign(**{col: pd.to_numeric(evidence[col], errors="coerce")  # CSV blanks are NaN
                                  for col in ("association_q", "log_odds_ci_low", "reliance_p", "rank")},
                               biased=as_flag(evidence["biased"]))
    associated, undecided_pairs, measured = is_associated(evidence), is_undecided(evidence), ~unmeasured(evidence)
    rows = []
    for k, name in enumerate(class_names):
        own = evidence["class"] == name
        shortcuts = evidence.loc[own & evidence["biased"]].sort_values("rank")["tag"].tolist()
        row = {"class": name, "n_shortcuts": len(shortcuts), "shortcuts": ", ".join(shortcuts),
               "n_train": int((labels == k).sum()), "top_tag": top[k][0], "top_support": top[k][1],
               "n_tested": int(own.sum()), "n_associated": int((own & associated).sum()),
               "measured": int((own & associated & measured).sum()),
               "undecided": int(len(undecided := evidence.loc[own & undecided_pairs, "tag"])),
               "undecided_tags": ", ".join(undecided),
               "reference_accuracy": (reference_accuracy or {}).get(name),
               "n_eval": None if eval_counts is None else int(eval_counts.get(name, 0))}
        row["status"], row["reason"] = _reason(row, min_support, 1 / len(class_names))
        rows.append(row)
    return pd.DataFrame(rows, columns=STATUS_COLUMNS)
