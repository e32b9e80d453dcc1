import pandas as pd
import pytest

from mavias.core.judging.quality import (
    Scores,
    decision_changes,
    decision_errors,
    evaluate_relevance,
    evaluation_table,
)
from mavias.core.relevance import RelevanceError


def table(rows):
    return pd.DataFrame([(c, t, r, "x") for c, t, r in rows], columns=["class", "tag", "relevant", "source"])


TRUTH = table([("a", "t1", True), ("a", "t2", True), ("a", "t3", False), ("a", "t4", False),
               ("b", "t1", True), ("b", "t5", False)])  # fmt: skip
PREDICTED = table([("a", "t1", True), ("a", "t2", False), ("a", "t3", True), ("a", "t4", False),
                   ("b", "t1", True), ("b", "t5", True), ("b", "extra", True)])  # fmt: skip


def test_micro_and_per_class_scores_by_hand():
    evaluation = evaluate_relevance(PREDICTED, TRUTH)
    # pairs: TP a/t1 b/t1; FP a/t3 b/t5; FN a/t2; the extra predicted pair is not in the ground truth
    assert evaluation.overall == Scores(true_positives=2, false_positives=2, false_negatives=1)
    assert evaluation.overall.precision == pytest.approx(0.5)
    assert evaluation.overall.recall == pytest.approx(2 / 3)
    assert evaluation.overall.f1 == pytest.approx(4 / 7)
    assert (evaluation.per_class["a"].precision, evaluation.per_class["a"].recall) == (0.5, 0.5)
    assert (evaluation.per_class["b"].precision, evaluation.per_class["b"].recall) == (0.5, 1.0)
    assert evaluation.per_class["b"].f1 == pytest.approx(2 / 3)


def test_empty_ratios_are_zero():
    assert Scores(0, 0, 0).precision == Scores(0, 0, 0).recall == Scores(0, 0, 0).f1 == 0.0


def test_a_ground_truth_pair_without_prediction_is_an_error():
    with pytest.raises(RelevanceError, match="no prediction"):
        evaluate_relevance(PREDICTED.iloc[1:], TRUTH)


def test_table_lists_classes_then_the_micro_average():
    rendered = evaluation_table(evaluate_relevance(PREDICTED, TRUTH), judge="j", dataset="d")
    assert list(rendered.columns[0].cells) == ["a", "b", "all (micro)"]
    assert list(rendered.columns[1].cells)[-1] == "50.0" and list(rendered.columns[2].cells)[-1] == "66.7"


def test_decision_errors_per_class():
    truth = pd.DataFrame({"class": ["car"] * 3 + ["bird"], "tag": ["wheel", "road", "tire", "wing"],
                          "relevant": [True, False, True, True], "source": "ground_truth"})  # fmt: skip
    judged = truth.assign(relevant=[True, True, False, True], source="judge")
    errors = decision_errors(judged, truth)
    assert list(errors) == ["car"]
    assert errors["car"].missed == ["tire"] and errors["car"].accepted == ["road"]


def test_decision_changes_between_two_nights():
    last_night = table([("car", "wheel", True), ("car", "road", False), ("car", "tire", True), ("car", "gone", True),
                        ("bird", "wing", True), ("bird", "sky", False)])  # fmt: skip
    tonight = table([("car", "wheel", True), ("car", "road", True), ("car", "tire", False), ("car", "grille", True),
                     ("car", "rain", False), ("bird", "wing", True), ("bird", "sky", False),
                     ("boat", "sail", True), ("boat", "sea", False)])  # fmt: skip
    changes = decision_changes(last_night, tonight)
    assert list(changes) == ["boat", "car"]  # bird is unchanged; "gone" is no longer decided, which is no change
    car, boat = changes["car"], changes["boat"]
    assert (car.became_relevant, car.became_irrelevant) == (["road"], ["tire"])
    assert (car.new_relevant, car.new_irrelevant, car.tags) == (["grille"], ["rain"], 4)
    assert (boat.became_relevant, boat.became_irrelevant, boat.new_relevant, boat.new_irrelevant) == (
        [], [], ["sail"], ["sea"])  # a new class: every tag is first seen
    assert decision_changes(tonight, tonight) == {}
