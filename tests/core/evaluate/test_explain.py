"""Why B' is empty, and which figures come from too few samples: the first missing ingredient is named."""

from __future__ import annotations

import pandas as pd
import pytest

from mavias.core.evaluate.explain import explain_empty_biased_tags, small_group_caveats
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


def _evidence(association_q: float) -> pd.DataFrame:
    row = dict.fromkeys(SHORTCUT_COLUMNS) | {"class": "dog", "tag": "grass", "association_q": association_q,
                                             "log_odds_ci_low": 1.5, "biased": False}
    return pd.DataFrame([row], columns=SHORTCUT_COLUMNS)


@pytest.mark.parametrize(("q", "start"), [(0.5, "no irrelevant tag is more frequent in one class"),
                                          (0.001, "reference too weak to show reliance: 1 tag(s) go with a class "
                                                  "('grass' (dog))")])
def test_association_then_reliance(q, start):
    tags = [["grass"]] * 12
    reason = _explain(tags, tags, _evidence(q))
    assert reason.startswith(start)
    if q < 0.05:
        assert "validation accuracy 90.0% on 12 images" in reason


def test_small_groups_are_named_with_their_size():
    metrics = {"min_support": 20, "small_groups": ["cat|conflicting", "dog|aligned"], "n_groups": 4,
               "worst_group_small": True, "worst_group": "cat|conflicting", "worst_group_n": 4,
               "worst_group_accuracy": 0.75}
    worst, groups = small_group_caveats(metrics, "MAVias open-set")
    assert "worst-group accuracy 0.750 comes from cat|conflicting with only 4 sample(s)" in worst
    assert groups.startswith("2 of 4 MAVias open-set groups have fewer than 20 samples")
    assert small_group_caveats(metrics, "ERM", groups=False) == [worst.replace("MAVias open-set", "ERM")]
    assert small_group_caveats(metrics | {"worst_group_small": False, "small_groups": []}, "x") == []
