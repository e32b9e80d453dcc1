import math

import pandas as pd
import pytest

from mavias.core.evaluate import (
    bias_conflicting_accuracy,
    evaluation_report,
    unbiased_accuracy,
    urbancars_metrics,
)
from mavias.errors import UserError


@pytest.mark.parametrize("aligned, conflicting", [("1", "0"), (True, False), (1, 0), ("true", "False")])
def test_bias_conflicting_accuracy(predictions, aligned, conflicting):
    pred = predictions((4, 4, {"aligned": aligned}), (5, 2, {"aligned": conflicting}))
    assert bias_conflicting_accuracy(pred, "aligned") == pytest.approx(0.4)


def test_bias_conflicting_accuracy_rejects_unknown_values(predictions):
    with pytest.raises(UserError, match="cannot read 'yes' as an alignment flag"):
        bias_conflicting_accuracy(predictions((3, 1, {"aligned": "yes"})), "aligned")
    assert math.isnan(bias_conflicting_accuracy(predictions((3, 1, {"aligned": "1"})), "aligned"))  # none to measure


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


def test_urbancars_gaps_average_the_class_cells_as_the_authors_do(predictions):
    # unequal cells: class 0 has 40 bg-conflicting co-aligned images (10 right), class 1 has 10 (9 right);
    # pooled rows would give 19/50 = 0.38, the authors' code the mean of the cells, (0.25 + 0.9) / 2
    pred = predictions((40, 10, {"label": 0, "bg": "0", "co": "1"}), (10, 9, {"label": 1, "bg": "0", "co": "1"}),
                       *((10, 10, {"label": lab, "bg": bg, "co": co}) for lab in (0, 1)
                         for bg, co in (("1", "1"), ("1", "0"), ("0", "0"))))
    metrics = urbancars_metrics(pred, "bg", "co", SHARED)
    assert metrics["bg_gap"] == pytest.approx((0.25 + 0.9) / 2 - metrics["id_accuracy"])


def test_a_gap_whose_cells_the_split_lacks_is_nan_and_the_others_stand(urbancars_pred):
    without_both = urbancars_pred[~((urbancars_pred["bg"] == "0") & (urbancars_pred["co"] == "0"))]
    metrics = urbancars_metrics(without_both, "bg", "co", SHARED)
    assert math.isnan(metrics["both_gap"])
    assert metrics["bg_gap"] == pytest.approx(0.6 - metrics["id_accuracy"])


def test_urbancars_training_proportions_read_true_false_flags_as_1_0():
    from types import SimpleNamespace

    from mavias.core.protocol.evaluation import BG_ALIGNED, CO_ALIGNED, _alignment_proportions

    def proportions(yes: str, no: str) -> dict:
        frame = pd.DataFrame({"label": ["car", "car", "car", "bike"], BG_ALIGNED: [yes, yes, no, yes],
                              CO_ALIGNED: [yes, no, no, yes]})
        return _alignment_proportions(_Prepared(["bike", "car"], train=SimpleNamespace(frame=frame)))

    assert proportions("true", "false") == proportions("1", "0")
    assert proportions("true", "false")[("car", True, True)] == 0.25 and sum(proportions("1", "0").values()) == 1


class _Prepared(dict):
    def __init__(self, classes: list[str], **splits):
        super().__init__(splits)
        self.classes = classes


def test_urbancars_requires_every_group_weight(urbancars_pred):
    with pytest.raises(ValueError, match="no training proportion"):
        urbancars_metrics(urbancars_pred, "bg", "co", {(True, True): 1.0})
    with pytest.raises(ValueError, match="keys"):
        urbancars_metrics(urbancars_pred, "bg", "co", {(True,): 1.0})


def test_evaluation_report(predictions):
    # b and c tie at 0.5: c, the larger, is the worst group
    pred = predictions((30, 27, {"g": "a"}), (10, 5, {"g": "b"}), (40, 20, {"g": "c"}))
    metrics, groups = evaluation_report(pred, "g", train_proportions={"a": 2, "b": 1, "c": 1}, n_boot=100)
    assert metrics["accuracy"] == pytest.approx(52 / 80)
    assert (metrics["worst_group"], metrics["worst_group_accuracy"], metrics["worst_group_small"]) == ("c", 0.5, False)
    assert metrics["small_groups"] == ["b"]
    assert metrics["weighted_average_accuracy"] == pytest.approx((2 * 0.9 + 0.5 + 0.5) / 4)
    assert metrics["average_accuracy"] == pytest.approx((0.9 + 0.5 + 0.5) / 3)
    assert sorted(groups["group"]) == ["a", "b", "c"]
