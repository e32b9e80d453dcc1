"""How well a judge's *relevant* set matches a ground-truth relevance table (the paper's judge-quality table)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.table import Table

from mavias.core.relevance import RelevanceError, validate_relevance

TRUTH_DIR = Path(__file__).with_name("truth")  # the built-in ground-truth relevance tables, realworld-<name>.csv


@dataclass(frozen=True)
class Scores:
    """Precision / recall / F1 of the predicted relevant set; 0.0 where a ratio has nothing to count."""

    true_positives: int
    false_positives: int
    false_negatives: int

    @property
    def precision(self) -> float:
        predicted = self.true_positives + self.false_positives
        return self.true_positives / predicted if predicted else 0.0

    @property
    def recall(self) -> float:
        actual = self.true_positives + self.false_negatives
        return self.true_positives / actual if actual else 0.0

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


@dataclass(frozen=True)
class Evaluation:
    overall: Scores  # micro-averaged over every (class, tag) pair of the ground truth
    per_class: dict[str, Scores]


def _scores(predicted: pd.Series, truth: pd.Series) -> Scores:
    return Scores(
        true_positives=int((predicted & truth).sum()),
        false_positives=int((predicted & ~truth).sum()),
        false_negatives=int((~predicted & truth).sum()),
    )


@dataclass(frozen=True)
class ClassErrors:
    """A judge's wrong decisions on one class, for a reviewer to fix with ``--review``."""

    missed: list[str]  # relevant tags judged irrelevant: they would enter the bias embedding as if they were biases
    accepted: list[str]  # irrelevant tags judged relevant: biases the method would not see


def _joined(predicted: pd.DataFrame, truth: pd.DataFrame) -> pd.DataFrame:
    """Every ground-truth pair with the prediction beside it; a pair without a prediction is an error."""
    predicted, truth = validate_relevance(predicted), validate_relevance(truth)
    joined = truth.merge(predicted, on=["class", "tag"], how="left", suffixes=("_truth", "_pred"))
    undecided = joined["relevant_pred"].isna()
    if undecided.any():
        examples = joined.loc[undecided, ["class", "tag"]].head(5).values.tolist()
        unjudged = sorted(set(truth["class"]) - set(predicted["class"]))
        why = f"; the predicted table has no class {', '.join(unjudged)}" if unjudged else ""
        raise RelevanceError(f"{int(undecided.sum())} ground-truth pair(s) have no prediction, e.g. {examples}{why}",
                             hint="score a table judged on the ground truth's classes and tags")
    joined["relevant_pred"] = joined["relevant_pred"].astype(bool)
    return joined


def _flips(rows: pd.DataFrame, before: str, after: str) -> tuple[list[str], list[str]]:
    """The sorted tags relevant in ``before`` but not in ``after``, then those irrelevant before and relevant after."""
    lost = sorted(rows.loc[rows[before] & ~rows[after], "tag"])
    gained = sorted(rows.loc[~rows[before] & rows[after], "tag"])
    return lost, gained


def decision_errors(predicted: pd.DataFrame, truth: pd.DataFrame) -> dict[str, ClassErrors]:
    """Per class with at least one wrong decision, the relevant tags missed and the irrelevant ones accepted."""
    joined = _joined(predicted, truth)
    errors = {}
    for name, rows in joined.groupby("class"):
        missed, accepted = _flips(rows, "relevant_truth", "relevant_pred")
        if missed or accepted:
            errors[str(name)] = ClassErrors(missed, accepted)
    return errors


@dataclass(frozen=True)
class ClassChanges:
    """How one class's decisions moved from one relevance table to the next (e.g. last night's to tonight's)."""

    became_relevant: list[str]  # irrelevant before: no longer part of the bias embedding
    became_irrelevant: list[str]  # relevant before: now treated as a potential bias
    new_relevant: list[str]  # tags decided for the first time, relevant
    new_irrelevant: list[str]  # tags decided for the first time, potential biases

    @property
    def tags(self) -> int:
        """How many of the class's tags changed or are new."""
        return sum(map(len, dataclasses.astuple(self)))


def decision_changes(previous: pd.DataFrame, current: pd.DataFrame) -> dict[str, ClassChanges]:
    """Per class whose decisions differ between two relevance tables: tags whose verdict flipped and tags decided
    for the first time (a new class has only those). A tag that is no longer decided is not a change: its images
    are gone, so it affects nothing."""
    joined = validate_relevance(current).merge(
        validate_relevance(previous), on=["class", "tag"], how="left", suffixes=("_now", "_before")
    )
    changes = {}
    for name, rows in joined.groupby("class"):
        first_seen = rows["relevant_before"].isna()
        known, new = rows[~first_seen].astype({"relevant_before": bool}), rows[first_seen]
        became_irrelevant, became_relevant = _flips(known, "relevant_before", "relevant_now")
        change = ClassChanges(became_relevant, became_irrelevant, sorted(new.loc[new["relevant_now"], "tag"]),
                              sorted(new.loc[~new["relevant_now"], "tag"]))
        if change.tags:
            changes[str(name)] = change
    return changes


def errors_table(errors: dict[str, ClassErrors], *, title: str = "wrong decisions per class") -> Table:
    table = Table(title=title)
    table.add_column("class")
    table.add_column("relevant, judged irrelevant (missed)")
    table.add_column("irrelevant, judged relevant (accepted)")
    for name, wrong in sorted(errors.items()):
        table.add_row(name, ", ".join(wrong.missed) or "-", ", ".join(wrong.accepted) or "-")
    return table


def evaluate_relevance(predicted: pd.DataFrame, truth: pd.DataFrame) -> Evaluation:
    """Score ``predicted`` on every (class, tag) pair of ``truth``; a pair it does not decide is an error."""
    joined = _joined(predicted, truth)
    per_class = {
        str(name): _scores(rows["relevant_pred"], rows["relevant_truth"]) for name, rows in joined.groupby("class")
    }
    return Evaluation(_scores(joined["relevant_pred"], joined["relevant_truth"]), per_class)


def evaluation_table(evaluation: Evaluation, *, judge: str, dataset: str) -> Table:
    """Rows per class and overall in percent, like the paper's judge-quality table (GPT-4o, Waterbirds: 96.1 / 79.0)."""
    table = Table(title=f"{judge} vs ground truth — {dataset}")
    for column in ("class", "precision", "recall", "F1", "TP", "FP", "FN"):
        table.add_column(column, justify="left" if column == "class" else "right")
    rows = [*sorted(evaluation.per_class.items()), ("all (micro)", evaluation.overall)]
    for name, scores in rows:
        table.add_row(
            name,
            f"{100 * scores.precision:.1f}",
            f"{100 * scores.recall:.1f}",
            f"{100 * scores.f1:.1f}",
            str(scores.true_positives),
            str(scores.false_positives),
            str(scores.false_negatives),
        )
    return table
