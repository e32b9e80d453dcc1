"""Honest answers on small data: why B' is empty, and which figures come from too few samples, each in one sentence
a user can act on.

B' (:mod:`mavias.core.evaluate.shortcuts`) needs, in turn: tags at all; tags judged irrelevant to a class; a (class,
irrelevant tag) pair with ``min_support`` training samples; such a pair more frequent in its class than elsewhere
(association); and a reference that leans on it on validation samples (reliance). The first step that fails is the
reason, with the numbers behind it and what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from mavias.core.evaluate.shortcuts import (
    CROSS_FITTED,
    MIN_ODDS_RATIO,
    as_flag,
    is_associated,
    is_undecided,
    pair_counts,
    too_few_to_decide,
)

MIN_TAG_PRECISION = 2 / 3  # below it, more than a third of the images the tagger gives the word do not show it


def _top_pair(labels: pd.Series, irrelevant: pd.Series) -> tuple[str, str, int]:
    """(class, tag, training samples) of the most frequent (class, irrelevant tag) pair."""
    top = pair_counts(labels, irrelevant).iloc[0]
    return str(top["label"]), str(top["tag"]), int(top["n"])


def explain_empty_biased_tags(train_labels: pd.Series, train_tags: pd.Series, train_irrelevant: pd.Series,
                              evidence: pd.DataFrame, *, min_support: int, reference_val_acc: float | None,
                              n_val: int) -> str:
    """The reason B' came out empty (``train_labels`` are class names; ``evidence`` is every pair tested)."""
    if not train_tags.map(len).any():
        return ("no training image has a tag: tag the images (mavias discover, or a tags sidecar with --tags) before "
                "looking for shortcuts")
    if not train_irrelevant.map(len).any():
        return ("no tag was judged irrelevant to its class (every tag describes the class it is on), so no tag can "
                "be a shortcut: check the relevance decisions (mavias judge export-review) or tag more of what is "
                "around the objects")
    if evidence.empty:
        name, tag, support = _top_pair(train_labels, train_irrelevant)
        return (f"too few samples per tag: no (class, irrelevant tag) pair has --min-support {min_support} training "
                f"images (the most: '{tag}' on {support} '{name}' images); add images, or lower --min-support "
                "(fewer samples give noisier answers)")
    associated = evidence[is_associated(evidence)]
    if associated.empty:
        return (f"no irrelevant tag is more frequent in one class than in the others by a shortcut's margin (odds ratio "
                f"{MIN_ODDS_RATIO}; {len(evidence)} pairs with at least min-support samples tested): the tags name no "
                "shortcut in this data")
    tags = ", ".join(f"'{t}' ({c})" for c, t in zip(associated["class"][:3], associated["tag"][:3]))
    if "decidable" in associated and not as_flag(associated["decidable"]).any():
        return (f"cannot decide: {len(associated)} tag(s) go with a class ({tags}), but too few images carry them, or "
                "lack them, to measure whether the reference leans on them: treat them as leads and collect more "
                "images of those classes with and without them")
    accuracy = "unknown" if reference_val_acc is None else f"{reference_val_acc:.1%}"
    chance = 1 / max(1, train_labels.nunique())
    if reference_val_acc is not None and reference_val_acc >= (chance + 1) / 2:  # as class_status judges a class
        return (f"not relied on: {len(associated)} tag(s) go with a class ({tags}), but the ERM reference "
                f"(validation accuracy {accuracy} on {n_val} images) does not lean on them as shortcuts: it takes "
                "them as evidence for the class neither on its own images nor on other classes'")
    return (f"reference too weak to show reliance: {len(associated)} tag(s) go with a class ({tags}), but the ERM "
            f"reference (validation accuracy {accuracy} on {n_val} images) does not measurably lean on them; "
            "a longer-trained reference or a larger validation split can show it")


def small_group_caveats(metrics: Mapping[str, Any], what: str, *, groups: bool = True) -> list[str]:
    """The figures of an :func:`~mavias.core.evaluate.dataset_metrics.evaluation_report` computed from fewer than its minimum
    support, as caveats naming them (``what``: whose groups, e.g. "MAVias open-set"); without ``groups`` only the
    worst group's."""
    min_support, small = metrics["min_support"], list(metrics["small_groups"])
    caveats = []
    if metrics["worst_group_small"]:
        caveats.append(f"the {what} worst-group accuracy {metrics['worst_group_accuracy']:.3f} comes from "
                       f"{metrics['worst_group']} with only {metrics['worst_group_n']} sample(s), fewer than the "
                       f"minimum support {min_support}: it is noise, not a measurement; collect more images of that "
                       "group")
    if small and groups:
        shown = ", ".join(small[:4]) + (" …" if len(small) > 4 else "")
        caveats.append(f"{len(small)} of {metrics['n_groups']} {what} groups have fewer than {min_support} samples "
                       f"({shown}): their accuracies, and the averages over them, are noisy")
    return caveats + empty_group_caveats(metrics, what)


def empty_group_caveats(metrics: Mapping[str, Any], what: str) -> list[str]:
    """The open-set groups without a sample in the evaluation set, as one caveat (none when every group has one)."""
    if not (empty := list(metrics.get("empty_groups") or [])):
        return []
    shown = ", ".join(empty[:4]) + (" …" if len(empty) > 4 else "")
    return [f"{len(empty)} {what} group(s) have no sample in the evaluation set ({shown}): the worst group is taken "
            "over the others and may look better than the model is; add images of those groups to the evaluation set"]


def trust_lines(*, tags_from: str, tags_quality: str | None, judged_by: str, judge_quality: str | None,
                train_irrelevant: pd.Series, evidence: pd.DataFrame | None, min_support: int,
                tag_precision: Mapping[str, float] | None = None) -> list[str]:
    """How far the tags behind B' and the bias embeddings can be trusted: who tagged and judged and how well (when
    measured), the share of training images with no irrelevant tag, the shortcuts that rest on few images, and those
    named by a word the tagger often gives wrongly (``tag_precision``: per tag, its measured precision, where known)."""
    lines = [f"Tags: {tags_from}; " + (tags_quality or "their quality on these images is unknown (no ground truth): "
                                        "a tagger's misses hide shortcuts and its confusions can add false ones; "
                                        "look at the example images under each shortcut"),
             f"Relevance: {judged_by}; " + (judge_quality or "its quality on these classes is unknown: review its "
                                            "decisions (mavias judge export-review)")]
    empty = float((train_irrelevant.map(len) == 0).mean()) if len(train_irrelevant) else 0.0
    lines.append(f"{empty:.0%} of the training images have no irrelevant tag: the bias path sees nothing of them "
                 "(their prompt is the empty 'a photo')" + (EMPTY_ACTION if empty >= MANY_EMPTY else ""))
    counts = ["support", "within_n_with", "within_n_without", "cross_n_with"]
    rows = pd.DataFrame() if evidence is None or evidence.empty else evidence[as_flag(evidence["biased"])]
    biased = rows.assign(**{column: pd.to_numeric(rows[column], errors="coerce").fillna(0) if column in rows else 0
                            for column in counts}).to_dict("records")  # from CSV the numbers may be text
    for row in biased:
        if row["support"] < 2 * min_support or too_few_to_decide(row):
            lines.append(f"{row['class']}: the shortcut '{row['tag']}' rests on few images ({int(row['support'])} "
                         f"training images carry it; its reliance was measured on {int(row['within_n_with'])} "
                         f"{_measured_on(row)} of the class with it and {int(row['within_n_without'])} without, and "
                         f"{int(row['cross_n_with'])} of other classes with it): treat it as a lead, not a finding")
    return lines + _undecided(evidence) + _doubtful_words(biased, tag_precision or {})


MANY_EMPTY = 0.2  # a fifth of the images without an irrelevant tag: worth saying what to do
EMPTY_ACTION = ("; tag more of what surrounds the objects (a larger vocabulary, a lower tagger threshold) or check "
                "the judge's decisions (mavias judge export-review)")


def _undecided(evidence: pd.DataFrame | None) -> list[str]:
    """One line naming the pairs that go with their class but that too few images could test."""
    needed = {"association_q", "log_odds_ci_low", "biased", "decidable", "class", "tag"}
    if evidence is None or evidence.empty or not needed <= set(evidence.columns):
        return []
    undecided = evidence[is_undecided(evidence)]
    if undecided.empty:
        return []
    named = ", ".join(f"{name} '{tag}'" for name, tag in zip(undecided["class"], undecided["tag"]))
    return [f"Cannot decide (too few images, with and without the tag, to measure the reference's reliance): {named}. "
            "Treat them as leads: collect more images of these classes with and without them"]


def _doubtful_words(biased: list[dict], tag_precision: Mapping[str, float]) -> list[str]:
    """One line naming the shortcuts whose word the tagger often gives wrongly (measured precision)."""
    wrong = {}
    for row in biased:
        if (precision := tag_precision.get(row["tag"], 1.0)) < MIN_TAG_PRECISION:
            wrong.setdefault(row["class"], []).append(f"'{row['tag']}' {1 - precision:.0%}")
    if not wrong:
        return []
    named = "; ".join(f"{name} {', '.join(words)}" for name, words in wrong.items())
    return [f"Shortcuts named by a word the tagger often gives wrongly (the share of the held-out images it gives the "
            f"word to that do not show it): {named}. Look at their example images: the cue may be another one under "
            "the tagger's word (a neighbouring colour, a similar object)"]


def _measured_on(row: dict) -> str:
    return "training images (cross-fitted)" if row.get("model") == CROSS_FITTED else "validation images"
