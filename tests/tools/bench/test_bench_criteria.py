"""`mavias bench criteria`: each criterion computed by hand on a small validation table, and the analysis."""

import numpy as np
import pandas as pd
import pytest

from mavias.tools.bench.criteria import ANALYSIS_BASE, CRITERIA, Validation, analyse, criterion_scores
from mavias.tools.bench.suite import default_config

# 8 validation images, classes 0/1. Class 0 has a biased tag; images 2-3 lack it ("unbiased"). The reference got
# images 3 and 7 wrong.
VAL = Validation(
    labels=np.array([0, 0, 0, 0, 1, 1, 1, 1]),
    tag_groups=np.array(["0|aligned", "0|aligned", "0|conflicting", "0|conflicting", "1|conflicting", "1|conflicting",
                         "1|conflicting", "1|conflicting"]),
    reference_correct=np.array([True, True, True, False, True, True, True, False]),
    true_groups=np.array(["0|a", "0|a", "0|c", "0|c", "1|a", "1|a", "1|a", "1|c"]),
)


def test_each_criterion_by_hand():
    correct = np.array([1, 1, 1, 0, 1, 1, 0, 0], dtype=bool)
    scores = criterion_scores(correct, VAL)
    balanced = (3 / 4 + 2 / 4) / 2
    assert scores["val_acc"] == pytest.approx(5 / 8)
    assert scores["reference errors"] == pytest.approx(0.5 * balanced + 0.5 * 0.0)  # images 3 and 7: both wrong
    # only class 0 has a biased tag, so only its unbiased images (2, 3) are pooled: 1 of 2 right
    assert scores["pooled unbiased-tag groups"] == pytest.approx(0.5 * balanced + 0.5 * 0.5)
    assert scores["union of both"] == pytest.approx(0.5 * balanced + 0.5 * (1 / 3))  # images 2, 3, 7
    assert scores["true val WG (oracle)"] == pytest.approx(0.0)  # group 1|c: image 7, wrong
    assert 0.0 <= scores["val_robust"] <= 1.0 and set(scores) == set(CRITERIA)
    assert {name: int(mask.sum()) for name, mask in VAL.pools().items()} == {
        "reference errors": 2, "pooled unbiased-tag groups": 2, "union of both": 3}


def test_without_any_biased_tag_the_pooled_criterion_is_the_balanced_accuracy():
    val = Validation(VAL.labels, np.array([g.replace("|aligned", "|conflicting") for g in VAL.tag_groups]),
                     VAL.reference_correct, VAL.true_groups)
    correct = np.array([1, 1, 1, 0, 1, 1, 0, 0], dtype=bool)
    assert criterion_scores(correct, val)["pooled unbiased-tag groups"] == pytest.approx((3 / 4 + 2 / 4) / 2)


def test_analysis_ranks_and_picks_only_among_mavias_checkpoints():
    rows = []
    for run, offset in (("ERM", 0.9), ("MAVias a", 0.0), ("MAVias b", 0.3)):
        for epoch, wg in enumerate((0.1, 0.2, 0.3), start=1):
            row = {"run": run, "epoch": epoch, "test_wg": wg + offset / 10, "test_balanced": 0.8}
            row |= {c: wg + offset / 10 for c in CRITERIA}  # every criterion agrees with test WG ...
            row["val_acc"] = -row["test_wg"]  # ... except val_acc, which ranks them backwards
            rows.append(row)
    result = analyse(pd.DataFrame(rows))
    assert result["spearman"]["val_robust"] == pytest.approx(1.0)
    assert result["spearman"]["val_acc"] == pytest.approx(-1.0)
    picks = {p["criterion"]: p for p in result["picks"]}
    assert (picks["val_robust"]["run"], picks["val_robust"]["epoch"]) == ("MAVias b", 3)  # ERM is never picked
    assert (picks["val_acc"]["run"], picks["val_acc"]["epoch"]) == ("MAVias a", 1)


def test_the_analysed_runs_are_never_stopped_early():
    """Every epoch's checkpoint is scored, so the recipe must not give the analysis's runs a patience of its own (0:
    the trainer never stops a run early)."""
    from mavias.core.train.recipe import _length, recipe_for

    cfg = default_config("mavias", 0, **ANALYSIS_BASE)
    update, _ = _length(cfg, recipe_for(cfg.backbone), n_train=3000)
    assert cfg.model_copy(update=update).patience == 0
