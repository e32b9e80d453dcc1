"""Quality gates: each gate passing and failing on hand-made metrics, skipped gates, the CI regression rule."""

from __future__ import annotations

import json

import pytest
import yaml

from mavias.errors import UserError
from mavias.ops.gates import DEFAULT_GATES_PATH, GateConfig, GateError, GateReport, evaluate_gates, load_gate_config

CONFIG = GateConfig(
    version=1,
    min_worst_group_accuracy=0.6,
    min_group_support=20,
    max_abs_bg_gap=0.1,
    max_abs_coobj_gap=0.1,
    max_abs_both_gap=0.2,
    must_beat_reference=True,
    reference_margin=0.0,
    max_regression_vs_production=0.02,
    max_validation_drop_vs_reference=0.1,
)


def evaluation(
    wg: float, ci: tuple[float, float] | None = None, *, n: int = 50, source: str = "open_set",
    urbancars: dict | None = None, n_samples: int = 1000, val: float | None = 0.95,
) -> dict:
    """The JSON part of an evaluate_checkpoint result with one worst-group section."""
    low, high = ci or (wg - 0.05, wg + 0.05)
    section = {
        "worst_group": "car|biased", "worst_group_accuracy": wg, "worst_group_ci_low": low,
        "worst_group_ci_high": high, "worst_group_n": n, "average_accuracy": wg + 0.1,
    }
    result = {"split": "test", "n_samples": n_samples, "accuracy": wg + 0.15, source: section}
    result |= {"urbancars": urbancars} if urbancars else {}
    return result | ({} if val is None else {"validation_accuracy": val})


def statuses(report) -> dict[str, str]:
    return {r.name: r.status for r in report.results}


def test_shipped_yaml_is_valid_and_complete():
    config = load_gate_config()
    assert config.version == 1 and config.wg_source == "open_set"
    thresholds = config.model_dump(exclude={"version", "wg_source", "must_beat_reference", "reference_margin"})
    assert all(value is not None for value in thresholds.values())


@pytest.mark.parametrize(("change", "named"), [({"version": 2}, "version"),
                                               ({"min_worst_group_acc": 0.5}, "did you mean min_worst_group_accuracy"),
                                               ({"min_worst_group_accuracy": 1.5}, "min_worst_group_accuracy")])
def test_invalid_config_is_rejected_naming_the_file_and_the_setting(tmp_path, change, named):
    path = tmp_path / "gates.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(DEFAULT_GATES_PATH.read_text()) | change))
    with pytest.raises(UserError, match=f"invalid gate config {path}: .*{named}"):
        load_gate_config(path)


@pytest.mark.parametrize(("text", "expect"), [("gates: [\n", "is not valid YAML"), ("- a\n", "must be a mapping")])
def test_a_gate_file_that_is_not_a_mapping_is_named(tmp_path, text, expect):
    path = tmp_path / "gates.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=f"gate config {path} {expect}"):
        load_gate_config(path)


def test_good_candidate_passes_and_uncomputable_gates_are_skipped_with_a_reason():
    report = evaluate_gates(evaluation(0.8), evaluation(0.6), None, CONFIG)
    assert report.passed
    assert statuses(report) == {
        "min_worst_group_accuracy": "passed", "min_group_support": "passed", "max_abs_bg_gap": "skipped",
        "max_abs_coobj_gap": "skipped", "max_abs_both_gap": "skipped", "must_beat_reference": "passed",
        "max_regression_vs_production": "skipped", "max_validation_drop_vs_reference": "passed",
    }
    production = next(r for r in report.results if r.name == "max_regression_vs_production")
    assert production.detail == "no production model yet" and production.value is None
    document = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert GateReport.from_dict(document) == report


@pytest.mark.parametrize(
    ("candidate", "reference", "failed"),
    [
        (evaluation(0.55), evaluation(0.4), "min_worst_group_accuracy"),
        (evaluation(0.8, n=12), evaluation(0.6), "min_group_support"),
        (evaluation(0.7), evaluation(0.7), "must_beat_reference"),  # a tie does not beat the reference
        (evaluation(0.8, urbancars={"id_accuracy": 0.9, "bg_gap": -0.15, "coobj_gap": -0.05, "both_gap": -0.1}),
         evaluation(0.6), "max_abs_bg_gap"),
        (evaluation(0.8, urbancars={"id_accuracy": 0.9, "bg_gap": -0.05, "coobj_gap": 0.12, "both_gap": -0.1}),
         evaluation(0.6), "max_abs_coobj_gap"),
        (evaluation(0.8, urbancars={"id_accuracy": 0.9, "bg_gap": -0.05, "coobj_gap": -0.05, "both_gap": -0.25}),
         evaluation(0.6), "max_abs_both_gap"),
        # a main model that stopped learning: its tag-derived worst group beats the reference's, its fit does not
        (evaluation(0.8, val=0.65), evaluation(0.6, val=0.97), "max_validation_drop_vs_reference"),
    ],
)
def test_each_gate_fails_alone(candidate, reference, failed):
    report = evaluate_gates(candidate, reference, None, CONFIG)
    assert not report.passed
    assert [r.name for r in report.failed] == [failed]


def test_the_validation_drop_is_measured_against_the_reference_and_skipped_without_a_validation_split():
    within = evaluate_gates(evaluation(0.8, val=0.88), evaluation(0.6, val=0.97), None, CONFIG)
    gate = next(r for r in within.results if r.name == "max_validation_drop_vs_reference")
    assert (gate.status, gate.value, gate.comparison) == ("passed", 0.88, ">=")
    assert gate.threshold == pytest.approx(0.87)
    unknown = evaluate_gates(evaluation(0.8, val=None), evaluation(0.6), None, CONFIG)
    assert unknown.passed and statuses(unknown)["max_validation_drop_vs_reference"] == "skipped"


def test_gap_gates_use_magnitudes_and_record_value_and_threshold():
    urbancars = {"id_accuracy": 0.9, "bg_gap": -0.08, "coobj_gap": 0.02, "both_gap": -0.19}
    report = evaluate_gates(evaluation(0.8, urbancars=urbancars), evaluation(0.6), None, CONFIG)
    bg = next(r for r in report.results if r.name == "max_abs_bg_gap")
    assert (bg.status, bg.value, bg.threshold, bg.comparison) == ("passed", 0.08, 0.1, "<=")
    assert report.passed


def test_a_gap_the_test_split_cannot_measure_blocks():
    """No bg- and co-conflicting test image: both_gap is NaN, and an unmeasured gap may be any size."""
    urbancars = {"id_accuracy": 0.9, "bg_gap": -0.08, "coobj_gap": 0.02, "both_gap": float("nan")}
    report = evaluate_gates(evaluation(0.8, urbancars=urbancars), evaluation(0.6), None, CONFIG)
    both = next(r for r in report.results if r.name == "max_abs_both_gap")
    assert (both.status, both.value) == ("failed", None) and "cannot be measured" in both.detail
    assert not report.passed and statuses(report)["max_abs_bg_gap"] == "passed"


def test_reference_margin_is_applied():
    config = CONFIG.model_copy(update={"reference_margin": 0.05})
    report = evaluate_gates(evaluation(0.64), evaluation(0.6), None, config)
    beat = next(r for r in report.results if r.name == "must_beat_reference")
    assert beat.status == "failed" and beat.threshold == pytest.approx(0.65)


@pytest.mark.parametrize(
    ("candidate_ci", "expected"),
    [
        ((0.74, 0.84), "passed"),  # point estimate below production, but within the CI + tolerance
        ((0.76, 0.82), "failed"),  # even the CI upper bound is below production - tolerance (0.83)
        ((0.80, 0.83), "passed"),  # exactly at the threshold
    ],
)
def test_production_regression_uses_the_candidate_ci(candidate_ci, expected):
    production = evaluation(0.85)
    report = evaluate_gates(evaluation(0.79, candidate_ci), evaluation(0.6), production, CONFIG)
    gate = next(r for r in report.results if r.name == "max_regression_vs_production")
    assert gate.status == expected
    assert gate.value == candidate_ci[1] and gate.threshold == pytest.approx(0.83)


def test_a_candidate_as_good_as_production_passes_though_its_interval_of_a_minimum_lies_below_it():
    production = evaluation(0.80)
    same = evaluation(0.80, (0.70, 0.76))  # 20 groups near 80%: the bootstrapped minimum's interval is biased low
    gate = next(r for r in evaluate_gates(same, evaluation(0.6), production, CONFIG).results
                if r.name == "max_regression_vs_production")
    assert (gate.status, gate.value) == ("passed", 0.80)


@pytest.mark.parametrize(("candidate", "reference"), [(0.8, 0.7), (0.3, 0.2)])
def test_a_margin_met_exactly_is_a_tie_whatever_the_float_rounding(candidate, reference):
    config = CONFIG.model_copy(update={"reference_margin": 0.1, "min_worst_group_accuracy": reference + 0.1})
    results = {r.name: r.status for r in evaluate_gates(evaluation(candidate), evaluation(reference), None,
                                                        config).results}
    assert results["must_beat_reference"] == "failed"  # more than the margin is asked for
    assert results["min_worst_group_accuracy"] == "passed"  # at least the threshold


def test_a_production_model_that_could_not_be_compared_is_named_as_such_not_as_no_production():
    why = "production v1 could not be compared: it was trained on other classes"
    gates = {r.name: r for r in evaluate_gates(evaluation(0.8), evaluation(0.6), None, CONFIG,
                                               no_production=why).results}
    assert (gates["max_regression_vs_production"].status, gates["max_regression_vs_production"].detail) == (
        "skipped", why)
    plain = {r.name: r for r in evaluate_gates(evaluation(0.8), evaluation(0.6), None, CONFIG).results}
    assert plain["max_regression_vs_production"].detail == "no production model yet"


def test_disabled_gates_are_reported_as_skipped():
    config = CONFIG.model_copy(update={"min_worst_group_accuracy": None, "must_beat_reference": False})
    report = evaluate_gates(evaluation(0.1), evaluation(0.9), None, config)
    assert report.passed
    assert statuses(report)["min_worst_group_accuracy"] == statuses(report)["must_beat_reference"] == "skipped"
    disabled = [r for r in report.results if r.name in ("min_worst_group_accuracy", "must_beat_reference")]
    assert all(r.detail == "disabled in the gate config" for r in disabled)


def test_closed_set_source_is_used_when_configured_and_required():
    config = CONFIG.model_copy(update={"wg_source": "closed_set"})
    closed = evaluation(0.8, source="closed_set") | {"open_set": evaluation(0.1)["open_set"]}
    assert evaluate_gates(closed, evaluation(0.6, source="closed_set"), None, config).passed
    with pytest.raises(GateError, match="closed_set"):
        evaluate_gates(evaluation(0.8), evaluation(0.6), None, config)


def test_models_evaluated_on_different_sets_are_not_compared():
    with pytest.raises(GateError, match="n_samples"):
        evaluate_gates(evaluation(0.8), evaluation(0.6), evaluation(0.7, n_samples=999), CONFIG)
