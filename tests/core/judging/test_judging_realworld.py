"""Quality floors of the offline judge on the hand-labelled real-world ground truth (mavias/core/judging/truth).

``realworld-dev``, ``realworld-heldout`` and ``realworld-unseen`` were inspected while improving the judge.
``realworld-blind`` was written before the last change to the judge and only its totals and per-class scores were
ever read. The goal is the paper's GPT-4o level (precision >= 0.90, recall >= 0.75) on the blind classes; the
floors below guard what is reached today (BENCHMARKS.md, "Offline judge on real-world classes").
"""

import pytest

from mavias.core.judging.cache import decide_all
from mavias.core.judging.quality import TRUTH_DIR, evaluate_relevance
from mavias.core.relevance import load_relevance

RECALL_FLOOR = {"realworld-dev": 0.78, "realworld-heldout": 0.77, "realworld-unseen": 0.74, "realworld-blind": 0.74}


def overall(judge, name):
    truth = load_relevance(TRUTH_DIR / f"{name}.csv")
    predicted = decide_all(judge, {c: rows["tag"] for c, rows in truth.groupby("class")})
    return evaluate_relevance(predicted, truth).overall


@pytest.mark.parametrize("name", sorted(RECALL_FLOOR))
def test_quality_floor(offline_judge, name):
    scores = overall(offline_judge, name)
    assert scores.precision >= 0.90 and scores.recall >= RECALL_FLOOR[name]


def test_goal_on_blind_classes(offline_judge):
    scores = overall(offline_judge, "realworld-blind")
    assert scores.precision >= 0.90 and scores.recall >= 0.75
