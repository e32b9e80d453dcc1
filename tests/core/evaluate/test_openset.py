import pandas as pd
import pytest

from mavias.core.evaluate import decoy_groups, find_biased_tags, openset_groups, openset_report
from mavias.core.evaluate.explain import small_group_caveats
from mavias.core.evaluate.openset import biased_tag_recovery

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
    biased = find_biased_tags(val_pred, val_tags, CLASSES, min_support=20, top_k=1)
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


def test_each_lift_comes_with_its_binomial_p_value(val_pred, val_tags):
    # grass: 20/25 correct against class accuracy 0.75 is chance (one-sided binomial p ~ 0.38);
    # sofa 19/20 against 0.75 (p ~ 0.024) and leash 15/20 against 0.5 (p ~ 0.021) are not.
    biased = find_biased_tags(val_pred, val_tags, CLASSES, min_support=20).set_index("tag")
    assert biased.loc[["grass", "sofa", "leash"], "p_value"].tolist() == pytest.approx([0.38, 0.0243, 0.0207], abs=5e-3)


def test_min_support_lets_rare_tags_in(val_pred, val_tags):
    biased = find_biased_tags(val_pred, val_tags, CLASSES, min_support=5)
    assert biased.loc[biased["class"] == "cat", "tag"].tolist() == ["rare", "sofa", "grass"]


def test_biased_tag_ties_break_by_support_then_tag(predictions):
    pred = predictions((8, 4, {"label": 0}))  # class accuracy 0.5
    tags = pd.Series([["b", "a", "c"], ["b", "a", "c"], ["c"], ["c"], [], ["a", "b"], ["c"], ["c"]])
    # a, b: 2/3 correct (lift 1/6, support 3); c: 4/6 (lift 1/6, support 6)
    assert find_biased_tags(pred, tags, ["only"], min_support=2)["tag"].tolist() == ["c", "a", "b"]


def test_find_biased_tags_with_no_biased_tag_is_empty(val_pred):
    tags = pd.Series([[]] * len(val_pred), index=val_pred.index)
    biased = find_biased_tags(val_pred, tags, CLASSES)
    assert biased.empty
    columns = ["class", "tag", "support", "tag_accuracy", "class_accuracy", "lift", "p_value", "rule", "rank", "in_top_k"]
    assert list(biased.columns) == columns


def test_find_biased_tags_validates_inputs(val_pred, val_tags):
    with pytest.raises(ValueError, match="index"):
        find_biased_tags(val_pred, val_tags.reset_index(drop=True).iloc[::-1], CLASSES)
    with pytest.raises(ValueError, match="class names"):
        find_biased_tags(val_pred, val_tags, ["cat"])
    with pytest.raises(TypeError, match="string"):
        find_biased_tags(val_pred, val_tags.map(" ".join), CLASSES)


def test_openset_groups_use_the_class_own_biased_tags(val_pred, val_tags, predictions):
    biased = find_biased_tags(val_pred, val_tags, CLASSES)
    test = predictions((4, 4, {"label": 0}), (2, 2, {"label": 1}))
    tags = pd.Series([["sofa", "x"], ["rare"], ["leash"], [], ["leash", "x"], None])
    expected = ["cat|aligned", "cat|conflicting", "cat|conflicting", "cat|conflicting", "dog|aligned", "dog|conflicting"]
    assert openset_groups(test, tags, biased, CLASSES).tolist() == expected
    only_top = biased[biased["tag"] != "sofa"]
    assert openset_groups(test, tags, only_top, CLASSES).iloc[0] == "cat|conflicting"
    with pytest.raises(ValueError, match="unknown class"):
        openset_groups(test, tags, biased.assign(**{"class": "bird"}), CLASSES)


def test_biased_tag_recovery_counts_hits():
    found = pd.DataFrame({"class": ["bird", "bird"], "tag": ["forest", "orange"]})
    assert biased_tag_recovery(found, {"bird": {"forest"}}) == {"precision": 0.5, "recall": 1.0, "n_found": 2, "n_true": 1}
    assert biased_tag_recovery(found.iloc[:0], {"bird": {"forest"}})["recall"] == 0.0


def test_decoys_are_other_classes_carrying_a_class_shortcut(predictions):
    biased = pd.DataFrame({"class": ["cat", "dog"], "tag": ["sofa", "leash"]})
    pred = predictions((3, 3, {"label": 0}), (3, 1, {"label": 1}))
    tags = pd.Series([["sofa"], [], ["leash"], ["sofa"], ["sofa", "leash"], []])
    decoys = decoy_groups(pred, tags, biased, CLASSES)
    # the cat with a leash is a dog decoy; the two dogs with a sofa are cat decoys (one also carries its own leash)
    assert list(zip(decoys.index, decoys)) == [(2, "dog|decoys"), (3, "cat|decoys"), (4, "cat|decoys")]


def test_openset_report_adds_the_decoy_groups_and_keeps_sample_counts(predictions):
    biased = pd.DataFrame({"class": ["cat", "dog"], "tag": ["sofa", "leash"]})
    pred = predictions((20, 20, {"label": 0}), (20, 10, {"label": 1}))
    tags = pd.Series([["sofa"]] * 15 + [[]] * 5 + [["leash"]] * 10 + [["sofa"]] * 10)
    metrics, table = openset_report(pred, tags, tags, biased, CLASSES, n_boot=20, min_support=5)
    assert table["group"].tolist() == ["cat|aligned", "cat|conflicting", "cat|decoys", "dog|aligned", "dog|conflicting"]
    assert table["n"].tolist() == [15, 5, 10, 10, 10]
    # the 10 correct dogs come first: the leash dogs are right, the sofa dogs (the cat decoys) all wrong
    assert table["accuracy"].tolist() == pytest.approx([1.0, 1.0, 0.0, 1.0, 0.0])
    assert (metrics["worst_group"], metrics["n_samples"], metrics["n_decoy_rows"]) == ("cat|decoys", 40, 10)
    assert metrics["accuracy"] == pytest.approx(30 / 40)


def test_a_class_missing_from_the_evaluation_set_has_no_group_and_the_report_goes_on(predictions):
    """A class with shortcuts but no evaluation image: its groups are absent (the nightly report says so), its
    shortcut still makes decoys of the other classes' images, and nothing fails."""
    classes = ["cat", "dog", "fox"]
    biased = pd.DataFrame({"class": ["cat", "fox"], "tag": ["sofa", "snow"]})
    pred = predictions((20, 15, {"label": 0}), (20, 10, {"label": 1}))  # no fox at all
    tags = pd.Series([["sofa"]] * 15 + [[]] * 5 + [["snow"]] * 10 + [[]] * 10)
    metrics, table = openset_report(pred, tags, tags, biased, classes, n_boot=20, min_support=5)
    assert not any(group.startswith("fox|") and not group.endswith("decoys") for group in table["group"])
    assert "fox|decoys" in set(table["group"]) and metrics["n_samples"] == 40
    assert metrics["empty_groups"] == ["fox|aligned", "fox|conflicting"]


def test_a_class_whose_every_sample_is_aligned_has_its_missing_conflicting_group_named(predictions):
    biased = pd.DataFrame({"class": ["cat"], "tag": ["sofa"]})
    pred = predictions((20, 20, {"label": 0}), (20, 15, {"label": 1}))
    tags = pd.Series([["sofa"]] * 20 + [[]] * 20)  # every cat on a sofa: no cat without one to measure
    metrics, _ = openset_report(pred, tags, None, biased, CLASSES, n_boot=20, min_support=5)
    assert metrics["empty_groups"] == ["cat|conflicting"] and metrics["worst_group"] == "dog|conflicting"
    (caveat,) = small_group_caveats(metrics, "label-free")
    assert caveat.startswith("1 label-free group(s) have no sample in the evaluation set (cat|conflicting)")
    assert "add images of those groups" in caveat
