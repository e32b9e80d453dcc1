import json

import pandas as pd
import pytest

from mavias.evaluate import (
    bias_conflicting_accuracy,
    evaluation_report,
    find_biased_tags,
    openset_evaluation,
    openset_groups,
    unbiased_accuracy,
    urbancars_metrics,
    write_evaluation,
)
from mavias.evaluate.protocols import biased_tag_recovery

CLASSES = ["cat", "dog"]

# Validation rows of a vanilla model: cat rows 0-39 (0-29 right: class accuracy 0.75),
# dog rows 40-79 (40-59 right: class accuracy 0.5). Tag -> rows carrying it.
TAG_ROWS = {
    "sofa": [*range(0, 19), 30, *range(40, 50), *range(60, 70)],  # cat 19/20 (lift +0.2); dog 10/20 (lift 0)
    "grass": [*range(0, 20), *range(30, 35)],  # cat 20/25 = 0.8 (lift +0.05)
    "rare": list(range(0, 5)),  # cat 5/5, support below 20
    "indoor": [*range(0, 15), *range(30, 35)],  # cat 15/20 = 0.75 (lift 0)
    "dark": [*range(20, 40)],  # cat 10/20 (lift -0.25)
    "leash": [*range(40, 55), *range(60, 65)],  # dog 15/20 (lift +0.25)
}


@pytest.fixture
def val_pred(predictions):
    return predictions((40, 30, {"label": 0}), (40, 20, {"label": 1}))


@pytest.fixture
def val_tags(val_pred):
    tags = [sorted(t for t, rows in TAG_ROWS.items() if i in rows) for i in range(len(val_pred))]
    tags[0] = [*tags[0], "sofa"]  # a repeated tag counts once
    return pd.Series(tags, index=val_pred.index)


def test_find_biased_tags_selects_by_lift_and_support(val_pred, val_tags):
    biased = find_biased_tags(val_pred, val_tags, CLASSES, min_support=20, top_k=1, max_p_value=None, rule="paper")
    expected = pd.DataFrame(
        {
            "class": ["cat", "cat", "dog"],
            "tag": ["sofa", "grass", "leash"],
            "support": [20, 25, 20],
            "tag_accuracy": [0.95, 0.8, 0.75],
            "class_accuracy": [0.75, 0.75, 0.5],
            "lift": [0.2, 0.05, 0.25],
            "p_value": [0.0243, 0.3783, 0.0207],
            "rank": [1, 2, 1],
            "in_top_k": [True, False, True],
        }
    )
    pd.testing.assert_frame_equal(biased[expected.columns], expected, check_dtype=False, atol=5e-4)
    assert (biased["rule"] == "paper").all()


def test_significance_filter_drops_chance_lifts(val_pred, val_tags):
    # grass: 20/25 correct against class accuracy 0.75 is chance (one-sided binomial p ~ 0.38);
    # sofa 19/20 against 0.75 (p ~ 0.024) and leash 15/20 against 0.5 (p ~ 0.021) are not.
    biased = find_biased_tags(val_pred, val_tags, CLASSES, min_support=20, max_p_value=0.05, rule="paper")
    assert biased["tag"].tolist() == ["sofa", "leash"]
    assert biased["p_value"].tolist() == pytest.approx([0.0243, 0.0207], abs=5e-4)
    assert find_biased_tags(val_pred, val_tags, CLASSES, min_support=20, max_p_value=0.01, rule="paper").empty


def test_robust_rule_compares_with_the_class_samples_lacking_the_tag(val_pred, val_tags):
    # cat: sofa 19/20 vs 11/20 without it (contrast 0.40), grass 20/25 vs 10/15 (0.13, Fisher p ~ 0.3: chance);
    # dog: leash 15/20 vs 5/20 (0.50)
    biased = find_biased_tags(val_pred, val_tags, CLASSES, min_support=20)
    assert biased["tag"].tolist() == ["sofa", "leash"]
    assert biased["contrast"].tolist() == pytest.approx([0.40, 0.50])
    assert (biased["q_value"] <= 0.05).all() and (biased["rule"] == "robust").all()


def test_robust_rule_ignores_noise_tags_under_an_accurate_reference(predictions):
    """A 98.75%-accurate reference: the shortcut tag's own lift is tiny (+1.0 point) but the 20 samples without
    it are 80% right; an independent noise tag has a positive lift by chance and no contrast."""
    pred = predictions((400, 400, {"label": 0}))
    pred["correct"] = True
    wrong = [0, 396, 397, 398, 399]
    pred.loc[wrong, "pred"] = 1 - pred.loc[wrong, "label"]
    pred["correct"] = pred["pred"] == pred["label"]
    tags = pd.Series([(["forest"] if i < 380 else []) + (["orange"] if i in {0, 396, *range(1, 199)} else [])
                      for i in range(400)], index=pred.index)
    paper = find_biased_tags(pred, tags, ["bird"], rule="paper")
    robust = find_biased_tags(pred, tags, ["bird"])
    assert set(paper["tag"]) == {"forest", "orange"}
    assert robust["tag"].tolist() == ["forest"]
    assert biased_tag_recovery(robust, {"bird": {"forest"}}) == {"precision": 1.0, "recall": 1.0, "n_found": 1, "n_true": 1}
    assert biased_tag_recovery(paper, {"bird": {"forest"}})["precision"] == 0.5


def test_unknown_rule_is_refused(val_pred, val_tags):
    with pytest.raises(ValueError, match="unknown biased-tag rule"):
        find_biased_tags(val_pred, val_tags, CLASSES, rule="loose")


def test_min_support_lets_rare_tags_in(val_pred, val_tags):
    biased = find_biased_tags(val_pred, val_tags, CLASSES, min_support=5, max_p_value=None, rule="paper")
    assert biased.loc[biased["class"] == "cat", "tag"].tolist() == ["rare", "sofa", "grass"]


def test_biased_tag_ties_break_by_support_then_tag(predictions):
    pred = predictions((8, 4, {"label": 0}))  # class accuracy 0.5
    tags = pd.Series([["b", "a", "c"], ["b", "a", "c"], ["c"], ["c"], [], ["a", "b"], ["c"], ["c"]])
    # a, b: 2/3 correct (lift 1/6, support 3); c: 4/6 (lift 1/6, support 6)
    assert find_biased_tags(pred, tags, ["only"], min_support=2, max_p_value=None, rule="paper")["tag"].tolist() == ["c", "a", "b"]


def test_find_biased_tags_with_no_biased_tag_is_empty(val_pred):
    tags = pd.Series([[]] * len(val_pred), index=val_pred.index)
    biased = find_biased_tags(val_pred, tags, CLASSES, max_p_value=None, rule="paper")
    assert biased.empty
    columns = ["class", "tag", "support", "tag_accuracy", "class_accuracy", "lift", "p_value", "contrast", "q_value",
               "rule", "rank", "in_top_k"]
    assert list(biased.columns) == columns


def test_find_biased_tags_validates_inputs(val_pred, val_tags):
    with pytest.raises(ValueError, match="index"):
        find_biased_tags(val_pred, val_tags.reset_index(drop=True).iloc[::-1], CLASSES)
    with pytest.raises(ValueError, match="class names"):
        find_biased_tags(val_pred, val_tags, ["cat"], max_p_value=None, rule="paper")
    with pytest.raises(TypeError, match="string"):
        find_biased_tags(val_pred, val_tags.map(" ".join), CLASSES)


def test_openset_groups_use_the_class_own_biased_tags(val_pred, val_tags, predictions):
    biased = find_biased_tags(val_pred, val_tags, CLASSES, max_p_value=None, rule="paper")
    test = predictions((4, 4, {"label": 0}), (2, 2, {"label": 1}))
    tags = pd.Series([["sofa", "x"], ["rare"], ["leash"], [], ["leash", "x"], None])
    expected = ["cat|biased", "cat|unbiased", "cat|unbiased", "cat|unbiased", "dog|biased", "dog|unbiased"]
    assert openset_groups(test, tags, biased, CLASSES).tolist() == expected
    only_top = biased[biased["tag"] != "sofa"]
    assert openset_groups(test, tags, only_top, CLASSES).iloc[0] == "cat|unbiased"
    with pytest.raises(ValueError, match="unknown class"):
        openset_groups(test, tags, biased.assign(**{"class": "bird"}), CLASSES)


@pytest.mark.parametrize("aligned, conflicting", [("1", "0"), (True, False), (1, 0), ("true", "False")])
def test_bias_conflicting_accuracy(predictions, aligned, conflicting):
    pred = predictions((4, 4, {"aligned": aligned}), (5, 2, {"aligned": conflicting}))
    assert bias_conflicting_accuracy(pred, "aligned") == pytest.approx(0.4)


def test_bias_conflicting_accuracy_rejects_unknown_values(predictions):
    with pytest.raises(ValueError, match="boolean"):
        bias_conflicting_accuracy(predictions((3, 1, {"aligned": "yes"})), "aligned")
    with pytest.raises(ValueError, match="no bias-conflicting"):
        bias_conflicting_accuracy(predictions((3, 1, {"aligned": "1"})), "aligned")


def test_unbiased_accuracy_is_the_mean_over_cells(predictions):
    pred = predictions(
        (8, 6, {"label": 0, "male": 0}),
        (2, 1, {"label": 0, "male": 1}),
        (4, 1, {"label": 1, "male": 0}),
        (6, 6, {"label": 1, "male": 1}),
    )
    assert unbiased_accuracy(pred, "label", "male") == pytest.approx((0.75 + 0.5 + 0.25 + 1.0) / 4)
    assert (pred["label"] == pred["pred"]).mean() == pytest.approx(0.7)  # differs from the cell mean


@pytest.fixture
def urbancars_pred(predictions):
    accuracy_tenths = {  # (label, bg_aligned, co_aligned) -> correct out of 10
        (0, "1", "1"): 9, (0, "1", "0"): 6, (0, "0", "1"): 7, (0, "0", "0"): 4,
        (1, "1", "1"): 10, (1, "1", "0"): 8, (1, "0", "1"): 5, (1, "0", "0"): 2,
    }
    return predictions(*((10, k, {"label": lab, "bg": bg, "co": co}) for (lab, bg, co), k in accuracy_tenths.items()))


SHARED = {(True, True): 0.8, (True, False): 0.1, (False, True): 0.05, (False, False): 0.05}


def test_urbancars_gaps(urbancars_pred):
    metrics = urbancars_metrics(urbancars_pred, "bg", "co", SHARED)
    class_0 = 0.8 * 0.9 + 0.1 * 0.6 + 0.05 * 0.7 + 0.05 * 0.4  # 0.835
    class_1 = 0.8 * 1.0 + 0.1 * 0.8 + 0.05 * 0.5 + 0.05 * 0.2  # 0.915
    assert 0.5 * class_0 + 0.5 * class_1 == pytest.approx(0.875)
    assert metrics == pytest.approx(
        {"id_accuracy": 0.875, "bg_gap": 0.6 - 0.875, "coobj_gap": 0.7 - 0.875, "both_gap": 0.3 - 0.875}
    )


def test_urbancars_per_class_proportions(urbancars_pred):
    per_class = {(0, *key): 2 * w for key, w in SHARED.items()} | {(1, *key): w for key, w in SHARED.items()}
    metrics = urbancars_metrics(urbancars_pred, "bg", "co", per_class)
    assert metrics["id_accuracy"] == pytest.approx((2 * 0.835 + 0.915) / 3)
    assert metrics["bg_gap"] == pytest.approx(0.6 - (2 * 0.835 + 0.915) / 3)


def test_urbancars_requires_every_group_weight(urbancars_pred):
    with pytest.raises(ValueError, match="no training proportion"):
        urbancars_metrics(urbancars_pred, "bg", "co", {(True, True): 1.0})
    with pytest.raises(ValueError, match="keys"):
        urbancars_metrics(urbancars_pred, "bg", "co", {(True,): 1.0})


def test_evaluation_report_and_write(tmp_path, predictions):
    pred = predictions((30, 27, {"g": "a"}), (10, 5, {"g": "b"}), (40, 20, {"g": "c"}))
    metrics, groups = evaluation_report(pred, "g", train_proportions={"a": 2, "b": 1, "c": 1}, n_boot=100)
    assert metrics["accuracy"] == pytest.approx(52 / 80)
    assert (metrics["worst_group"], metrics["worst_group_accuracy"], metrics["worst_group_small"]) == ("b", 0.5, True)
    assert metrics["small_groups"] == ["b"]
    assert metrics["weighted_average_accuracy"] == pytest.approx((2 * 0.9 + 0.5 + 0.5) / 4)
    assert metrics["average_accuracy"] == pytest.approx((0.9 + 0.5 + 0.5) / 3)

    out = write_evaluation(tmp_path / "eval", metrics, groups)
    assert sorted(p.name for p in out.iterdir()) == ["groups.csv", "metrics.json"]
    assert json.loads((out / "metrics.json").read_text()) == metrics
    pd.testing.assert_frame_equal(pd.read_csv(out / "groups.csv"), groups, check_dtype=False)


def test_write_evaluation_refuses_non_json_metrics(tmp_path, predictions):
    _, groups = evaluation_report(predictions((20, 10, {"g": "a"})), "g", n_boot=10)
    with pytest.raises(ValueError):
        write_evaluation(tmp_path, {"accuracy": float("nan")}, groups)
    assert list(tmp_path.iterdir()) == []


def test_openset_evaluation_end_to_end(tmp_path, val_pred, val_tags, predictions):
    test = predictions((20, 18, {"label": 0}), (20, 10, {"label": 0}), (25, 20, {"label": 1}))
    test["sample_id"] = "t" + test["sample_id"]
    tags = pd.Series([["sofa"]] * 20 + [[]] * 20 + [["leash"]] * 25, index=test.index)
    metrics, groups, biased = openset_evaluation(val_pred, val_tags, test, tags, CLASSES, n_boot=50, max_p_value=None, rule="paper")
    assert groups["group"].tolist() == ["cat|biased", "cat|unbiased", "dog|biased"]
    assert groups["accuracy"].tolist() == pytest.approx([0.9, 0.5, 0.8])
    assert (metrics["worst_group"], metrics["n_biased_tags"], metrics["protocol"]) == ("cat|unbiased", 3, "open-set")

    write_evaluation(tmp_path, metrics, groups, biased)
    assert pd.read_csv(tmp_path / "biased_tags.csv")["tag"].tolist() == ["sofa", "grass", "leash"]

    with pytest.raises(ValueError, match="both the validation and the test"):
        openset_evaluation(val_pred, val_tags, val_pred, val_tags, CLASSES, max_p_value=None, rule="paper")
