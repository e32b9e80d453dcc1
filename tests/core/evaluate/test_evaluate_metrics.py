import pandas as pd
import pytest

from mavias.core.evaluate import average_accuracy, group_key, group_table, worst_group


@pytest.fixture
def three_groups(predictions):
    # A: 7/10 (small), B: 27/30, C: 10/25
    return predictions((10, 7, {"g": "A"}), (30, 27, {"g": "B"}), (25, 10, {"g": "C"}))


def test_group_table_counts_accuracies_and_flags(three_groups):
    table = group_table(three_groups, "g", train_proportions={"A": 1, "B": 3, "C": 4, "absent": 100})
    expected = pd.DataFrame(
        {
            "group": ["A", "B", "C"],
            "n": [10, 30, 25],
            "correct": [7, 27, 10],
            "accuracy": [0.7, 0.9, 0.4],
            "train_proportion": [1 / 8, 3 / 8, 4 / 8],
            "small": [True, False, False],
        }
    )
    pd.testing.assert_frame_equal(table, expected, check_dtype=False)


def test_group_table_without_proportions_and_custom_support(three_groups):
    table = group_table(three_groups, "g", min_support=26)
    assert table["train_proportion"].isna().all()
    assert table["small"].tolist() == [True, False, True]
    assert group_table(three_groups, "g", min_support=25)["small"].tolist() == [True, False, False]


def test_group_table_rejects_missing_proportion_and_missing_group(three_groups):
    with pytest.raises(ValueError, match="C"):
        group_table(three_groups, "g", train_proportions={"A": 1, "B": 1})
    with pytest.raises(ValueError, match="missing group"):
        group_table(three_groups.assign(g=three_groups["g"].where(three_groups.index > 0)), "g")


def test_average_accuracy_unweighted_and_weighted(three_groups):
    averages = average_accuracy(three_groups, "g", {"A": 1, "B": 3, "C": 4})
    assert averages["unweighted"] == pytest.approx((0.7 + 0.9 + 0.4) / 3)
    assert averages["weighted"] == pytest.approx((0.7 * 1 + 0.9 * 3 + 0.4 * 4) / 8)  # 0.625
    assert average_accuracy(three_groups, "g")["weighted"] is None


def test_average_accuracy_waterbirds_training_counts(predictions):
    pred = predictions((100, 99, {"g": 0}), (100, 60, {"g": 1}), (100, 70, {"g": 2}), (100, 95, {"g": 3}))
    train_counts = {"0": 3498, "1": 184, "2": 56, "3": 1057}
    expected = (0.99 * 3498 + 0.60 * 184 + 0.70 * 56 + 0.95 * 1057) / 4795
    assert average_accuracy(pred, "g", train_counts)["weighted"] == pytest.approx(expected)


def test_groups_may_be_given_as_a_series(three_groups):
    by_series = group_table(three_groups, three_groups["g"].rename("anything"))
    pd.testing.assert_frame_equal(by_series, group_table(three_groups, "g"))
    with pytest.raises(ValueError, match="index"):
        group_table(three_groups, three_groups["g"].reset_index(drop=True).iloc[::-1])


def test_worst_group_point_estimate_and_small_flag(three_groups, predictions):
    worst = worst_group(three_groups, "g", n_boot=200)
    assert (worst.group, worst.accuracy, worst.n, worst.small) == ("C", 0.4, 25, False)

    with_tiny = pd.concat([three_groups, predictions((5, 1, {"g": "tiny"}))], ignore_index=True)
    assert (worst_group(with_tiny, "g").group, worst_group(with_tiny, "g").small) == ("tiny", True)
    assert worst_group(with_tiny, "g", include_small=False).group == "C"
    with pytest.raises(ValueError, match="min_support"):
        worst_group(with_tiny, "g", include_small=False, min_support=1000)


def test_worst_group_ties_go_to_the_largest_group_then_by_name(predictions):
    pred = predictions((5, 4, {"g": "a"}), (500, 400, {"g": "b"}), (20, 20, {"g": "c"}))
    assert (worst_group(pred, "g").group, worst_group(pred, "g").n) == ("b", 500)  # its size, not its name, decides
    same_size = predictions((40, 20, {"g": "b"}), (40, 20, {"g": "a"}), (20, 20, {"g": "c"}))
    assert worst_group(same_size, "g").group == "a"


def test_bootstrap_interval_matches_binomial_width_of_the_worst_group(predictions):
    pred = predictions((100, 90, {"g": "good"}), (100, 50, {"g": "bad"}))
    worst = worst_group(pred, "g", n_boot=4000, seed=1)
    # sd of a 50% accuracy over 100 samples is 0.05 -> interval about 0.40 .. 0.60
    assert 0.38 <= worst.ci_low <= 0.42
    assert 0.58 <= worst.ci_high <= 0.62


def test_bootstrap_resamples_within_groups(predictions):
    # all-correct and all-wrong groups: a stratified resample keeps every group's accuracy, so the CI is exact.
    worst = worst_group(predictions((30, 30, {"g": "right"}), (30, 0, {"g": "wrong"})), "g")
    assert (worst.ci_low, worst.ci_high) == (0.0, 0.0)


def test_bootstrap_contains_estimate_shrinks_and_is_reproducible(predictions):
    small = predictions((40, 36, {"g": "x"}), (40, 24, {"g": "y"}))
    large = predictions((400, 360, {"g": "x"}), (400, 240, {"g": "y"}))
    a, b = worst_group(small, "g", seed=7), worst_group(small, "g", seed=7)
    assert a == b
    few = [worst_group(small, "g", n_boot=50, seed=s) for s in (7, 7, 8)]
    assert few[0] == few[1] != few[2]
    assert a.ci_low <= a.accuracy <= a.ci_high
    wide, narrow = a.ci_high - a.ci_low, (lambda w: w.ci_high - w.ci_low)(worst_group(large, "g", seed=7))
    assert narrow < wide / 2


def test_group_key_format():
    df = pd.DataFrame(
        {"class": ["car", "bus"], "attr_bg": ["street", "field"], "co": ["cow", None], "flag": [True, False]}
    )
    expected = ["car|bg=street|flag=True", "bus|bg=field|flag=False"]
    assert group_key(df, ["class", "attr_bg", "flag"]).tolist() == expected
    assert group_key(df.iloc[:1], ["class", "attr_bg", "co"]).tolist() == ["car|bg=street|co=cow"]
    with pytest.raises(ValueError, match="missing"):
        group_key(df, ["class", "co"])
    with pytest.raises(KeyError):
        group_key(df, ["class", "nope"])


def test_empty_predictions_rejected():
    with pytest.raises(ValueError, match="empty"):
        group_table(pd.DataFrame({"label": [], "pred": [], "g": []}), "g")

