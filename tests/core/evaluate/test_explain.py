"""Why B' is empty, and which figures come from too few samples: the first missing ingredient is named."""

from __future__ import annotations

import pandas as pd
import pytest

from mavias.core.evaluate.explain import explain_empty_biased_tags, small_group_caveats, trust_lines
from mavias.core.evaluate.shortcuts import SHORTCUT_COLUMNS

LABELS = pd.Series(["cat"] * 6 + ["dog"] * 6)


def _explain(tags, irrelevant, evidence=None, **kwargs):
    evidence = pd.DataFrame(columns=SHORTCUT_COLUMNS) if evidence is None else evidence
    return explain_empty_biased_tags(LABELS, pd.Series(tags), pd.Series(irrelevant), evidence,
                                     **{"min_support": 20, "reference_val_acc": 0.9, "n_val": 12, **kwargs})


def test_no_tags_at_all():
    assert _explain([[]] * 12, [[]] * 12).startswith("no training image has a tag")


def test_no_irrelevant_tag():
    assert _explain([["whiskers"]] * 12, [[]] * 12).startswith("no tag was judged irrelevant")


def test_too_few_samples_per_tag_names_the_largest_pair():
    tags = [["sofa"]] * 5 + [[]] + [["grass"]] * 6
    reason = _explain(tags, tags)
    assert reason.startswith("too few samples per tag: no (class, irrelevant tag) pair has --min-support 20")
    assert "(the most: 'grass' on 6 'dog' images)" in reason


def _evidence(association_q: float, decidable: bool = True) -> pd.DataFrame:
    row = dict.fromkeys(SHORTCUT_COLUMNS) | {"class": "dog", "tag": "grass", "association_q": association_q,
                                             "log_odds_ci_low": 1.5, "biased": False, "decidable": decidable}
    return pd.DataFrame([row], columns=SHORTCUT_COLUMNS)


@pytest.mark.parametrize(("q", "accuracy", "start"), [
    (0.5, 0.9, "no irrelevant tag is more frequent in one class"),
    (0.001, 0.9, "not relied on: 1 tag(s) go with a class ('grass' (dog)), but the ERM reference (validation accuracy "
                 "90.0% on 12 images) does not lean on them"),
    (0.001, 0.6, "reference too weak to show reliance: 1 tag(s) go with a class ('grass' (dog))"),  # 2 classes: < 75%
    (0.001, None, "reference too weak to show reliance")])
def test_association_then_reliance(q, accuracy, start):
    """A reference accurate enough (as the per-class status judges it) that does not lean on the tags is not called
    too weak: the two reports agree."""
    tags = [["grass"]] * 12
    assert _explain(tags, tags, _evidence(q), reference_val_acc=accuracy).startswith(start)


def test_associated_tags_too_few_images_can_measure_are_undecided():
    tags = [["grass"]] * 12
    reason = _explain(tags, tags, _evidence(0.001, decidable=False))
    assert reason.startswith("cannot decide: 1 tag(s) go with a class ('grass' (dog)), but too few images carry them")


def test_small_groups_are_named_with_their_size():
    metrics = {"min_support": 20, "small_groups": ["cat|conflicting", "dog|aligned"], "n_groups": 4,
               "worst_group_small": True, "worst_group": "cat|conflicting", "worst_group_n": 4,
               "worst_group_accuracy": 0.75}
    worst, groups = small_group_caveats(metrics, "MAVias open-set")
    assert "worst-group accuracy 0.750 comes from cat|conflicting with only 4 sample(s)" in worst
    assert groups.startswith("2 of 4 MAVias open-set groups have fewer than 20 samples")
    assert small_group_caveats(metrics, "ERM", groups=False) == [worst.replace("MAVias open-set", "ERM")]
    assert small_group_caveats(metrics | {"worst_group_small": False, "small_groups": []}, "x") == []


def test_trust_lines_say_who_tagged_and_judged_how_much_is_empty_and_what_rests_on_few_images():
    evidence = pd.DataFrame([
        {"class": "car", "tag": "street", "biased": True, "support": 400, "within_n_with": 120, "within_n_without": 30},
        {"class": "boat", "tag": "sea", "biased": True, "support": 25, "within_n_with": 19, "within_n_without": 1},
        {"class": "ship", "tag": "port", "biased": True, "support": 30, "within_n_with": 28, "within_n_without": 2,
         "model": "cross-fitted"},
        {"class": "bird", "tag": "sky", "biased": False, "support": 5, "within_n_with": 2, "within_n_without": 0},
        {"class": "car", "tag": "road", "biased": True, "support": 300, "within_n_with": 296, "within_n_without": 4,
         "cross_n_with": 150},  # decided on the other classes' images: not few
        {"class": "bird", "tag": "nest", "biased": False, "support": 40, "within_n_with": 39, "within_n_without": 1,
         "cross_n_with": 2, "decidable": False, "association_q": 0.001, "log_odds_ci_low": 2.0},
    ])
    irrelevant = pd.Series([["street"], [], ["sea"], []])
    lines = trust_lines(tags_from="the data's own tags", tags_quality=None, judged_by="the offline judge",
                        judge_quality="measured precision 98% / recall 76%", train_irrelevant=irrelevant,
                        evidence=evidence, min_support=20)
    assert lines[0].startswith("Tags: the data's own tags; their quality on these images is unknown")
    assert lines[1] == "Relevance: the offline judge; measured precision 98% / recall 76%"
    assert lines[2].startswith("50% of the training images have no irrelevant tag") and "tag more of" in lines[2]
    thin, folds, undecided = lines[3:]  # car/street, car/road (by other classes) and untested bird/sky: no line
    assert thin.startswith("boat: the shortcut 'sea' rests on few images (25 training images") and "1 without" in thin
    assert "measured on 19 validation images of the class" in thin and "0 of other classes" in thin
    assert "measured on 28 training images (cross-fitted) of the class with it and 2 without" in folds
    assert undecided.startswith("Cannot decide") and "bird 'nest'" in undecided and "sky" not in undecided
    assert "collect more images" in undecided
    few_empty = trust_lines(tags_from="t", tags_quality="q", judged_by="j", judge_quality="q",
                            train_irrelevant=pd.Series([["street"]] * 9 + [[]]), evidence=None, min_support=20)
    assert few_empty[2].startswith("10% of the training images") and "tag more of" not in few_empty[2]


def test_a_shortcut_named_by_a_word_the_tagger_often_gives_wrongly_gets_a_line():
    evidence = pd.DataFrame([
        {"class": "airplane", "tag": "pink", "biased": True, "support": 445, "within_n_with": 129,
         "within_n_without": 271},
        {"class": "airplane", "tag": "desert", "biased": True, "support": 1267, "within_n_with": 380,
         "within_n_without": 20},
        {"class": "fish", "tag": "yellow", "biased": False, "support": 600, "within_n_with": 180,
         "within_n_without": 200},
    ])
    common = {"tags_from": "the data's own tags", "tags_quality": "measured mean per-tag F1 0.75 on held-out images",
              "judged_by": "the offline judge", "judge_quality": None, "train_irrelevant": pd.Series([["pink"]]),
              "evidence": evidence, "min_support": 20}
    lines = trust_lines(**common, tag_precision={"pink": 0.38, "desert": 1.0, "yellow": 0.2})
    (wrong,) = [line for line in lines if "gives wrongly" in line]  # desert is right; yellow is no shortcut
    assert "that do not show it): airplane 'pink' 62%. Look at their example images" in wrong
    assert not any("gives wrongly" in line for line in trust_lines(**common))  # unknown precision: no claim
