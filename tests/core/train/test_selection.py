"""The val_robust selection criterion on hand-made validation tables, degenerate cases included."""

import numpy as np
import pytest

from mavias.core.train.selection import is_uninformative, robust_selection_score


def test_without_groups_it_is_the_balanced_class_accuracy():
    correct = [1, 1, 1, 0, 1, 0]
    labels = [0, 0, 0, 0, 1, 1]  # class 0: 3/4, class 1: 1/2
    assert robust_selection_score(correct, labels) == pytest.approx((0.75 + 0.5) / 2)


def test_hand_computed_value_with_a_supported_group():
    # class 0: 20 samples, group "b" 14/15 right, group "u" 1/5 right -> class acc 15/20 = 0.75
    correct = [1] * 14 + [0] + [1] + [0] * 4
    groups = ["b"] * 15 + ["u"] * 5
    labels = [0] * 20
    shrunk_u = (1 + 10 * 0.75) / (5 + 10)
    assert robust_selection_score(correct, labels, groups) == pytest.approx(0.5 * 0.75 + 0.5 * shrunk_u)


@pytest.mark.parametrize("n_small", [1, 2, 3])
def test_tiny_always_wrong_groups_are_pooled_and_cannot_zero_the_score(n_small):
    correct = [1] * 40 + [0] * n_small
    labels = [0] * 20 + [1] * 20 + [1] * n_small
    groups = ["a|biased"] * 20 + ["b|biased"] * 20 + ["b|unbiased"] * n_small
    score = robust_selection_score(correct, labels, groups)
    class_b = 20 / (20 + n_small)
    # the pool of small groups stays below the support: it counts only through class b's accuracy
    shrunk_b = (20 + 10 * class_b) / (20 + 10)
    assert score == pytest.approx(0.5 * (1 + class_b) / 2 + 0.5 * (1 + shrunk_b) / 2)
    assert score > 0.9


def test_a_supported_conflicting_group_still_moves_the_score():
    labels = [0] * 30
    groups = ["biased"] * 20 + ["unbiased"] * 10
    shortcut = robust_selection_score([1] * 20 + [0] * 10, labels, groups)
    debiased = robust_selection_score([1] * 18 + [0] * 2 + [1] * 8 + [0] * 2, labels, groups)
    assert debiased > shortcut


def test_small_groups_pool_into_one_scored_group():
    labels = [0] * 26
    groups = ["big"] * 20 + ["s1"] * 3 + ["s2"] * 3  # the two 3-sample groups pool into 6 >= 5
    score = robust_selection_score([1] * 20 + [0] * 6, labels, groups)
    class_acc = 20 / 26
    assert score == pytest.approx(0.5 * class_acc + 0.5 * (0 + 10 * class_acc) / (6 + 10))


def test_one_class_only():
    assert robust_selection_score([1, 0, 1, 1], [2, 2, 2, 2], ["x", "x", "y", "y"]) == pytest.approx(0.75)


def test_empty_table_is_refused():
    with pytest.raises(ValueError, match="no validation samples"):
        robust_selection_score([], [])


def test_uninformative_means_constant_over_epochs():
    assert is_uninformative([0.0, 0.0, 0.0])
    assert is_uninformative([])
    assert not is_uninformative(np.array([0.5, 0.5, 0.51]))
