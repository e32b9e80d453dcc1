"""How well a judge's *relevant* set matches a ground-truth relevance table (the paper's judge-quality table)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from rich.table import Table

from mavias.relevance import RelevanceError, validate_relevance


@dataclass(frozen=True)
class Scores:
    """Precision / recall / F1 of the predicted relevant set; 0.0 where a ratio has nothing to count."""

    true_positives: int
    false_positives: int
    false_negatives: int
    pairs: int

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
        pairs=len(truth),
    )


def evaluate_relevance(predicted: pd.DataFrame, truth: pd.DataFrame) -> Evaluation:
    """Score ``predicted`` on every (class, tag) pair of ``truth``; a pair it does not decide is an error."""
    predicted, truth = validate_relevance(predicted), validate_relevance(truth)
    joined = truth.merge(predicted, on=["class", "tag"], how="left", suffixes=("_truth", "_pred"))
    undecided = joined["relevant_pred"].isna()
    if undecided.any():
        examples = joined.loc[undecided, ["class", "tag"]].head(5).values.tolist()
        raise RelevanceError(f"{int(undecided.sum())} ground-truth pair(s) have no prediction, e.g. {examples}")
    joined["relevant_pred"] = joined["relevant_pred"].astype(bool)
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
