"""Promotion quality gates from a versioned YAML (``gates_default.yaml`` ships with the package).

Metrics are :func:`mavias.core.protocol.evaluate_checkpoint` dicts (or their JSON part) of the candidate, the ERM
reference and, when there is one, the current production model, all on the same evaluation set. The worst group is
the ``open_set`` (tag-derived) or ``closed_set`` (attribute) one, as ``wg_source`` says.

Gates, each reported with its value, threshold and verdict:

- ``min_worst_group_accuracy``: candidate WG accuracy >= threshold;
- ``min_group_support``: the worst group has >= threshold samples (a WG accuracy from a handful of samples is noise);
- ``max_abs_bg_gap`` / ``max_abs_coobj_gap`` / ``max_abs_both_gap``: |UrbanCars-style gap| <= threshold, skipped when
  the evaluation has no such gaps;
- ``must_beat_reference``: candidate WG accuracy > reference WG accuracy + margin;
- ``max_regression_vs_production``: the optimistic end of the candidate's WG (its 95% CI upper bound, or the point
  estimate where that is higher: a bootstrapped minimum's interval is biased low when several groups are close to
  the worst) >= production WG accuracy - tolerance, so a regression blocks only when even that is below production;
  skipped while there is no production model;
- ``max_validation_drop_vs_reference``: candidate validation accuracy >= the reference's - tolerance. The validation
  split is drawn like training, so a debiased model fits it about as well as the plain one; far below it, the main
  model stopped learning (a bias expert that explains nearly every label can starve it), however its worst group on
  tag-derived groups looks.

A gate whose threshold is null is reported as skipped ("disabled"); a skipped gate never blocks, a failed one does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mavias.errors import UserError, describe_validation_error
from mavias.utils.mappings import read_yaml_mapping

DEFAULT_GATES_PATH = Path(__file__).with_name("gates_default.yaml")
GAP_GATES = {"max_abs_bg_gap": "bg_gap", "max_abs_coobj_gap": "coobj_gap", "max_abs_both_gap": "both_gap"}
TIE = 1e-9  # metrics are ratios of counts: one a threshold's float rounding puts a hair off it is a tie
COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda value, threshold: value >= threshold - TIE,
    "<=": lambda value, threshold: value <= threshold + TIE,
    ">": lambda value, threshold: value > threshold + TIE,
}
EVALUATION_KEYS = ("split", "n_samples")  # must agree between the models compared
DISABLED = "disabled in the gate config"
GATE_TITLES = {
    "min_worst_group_accuracy": "Worst-group accuracy",
    "min_group_support": "Worst-group size",
    "max_abs_bg_gap": "Background gap (magnitude)",
    "max_abs_coobj_gap": "Co-occurring object gap (magnitude)",
    "max_abs_both_gap": "Background + object gap (magnitude)",
    "must_beat_reference": "Beats the ERM reference",
    "max_regression_vs_production": "No regression vs production",
    "max_validation_drop_vs_reference": "Validation accuracy vs the ERM reference",
}

GateStatus = Literal["passed", "failed", "skipped"]
Number = float | int


class GateError(UserError, ValueError):
    """The metrics cannot be gated as configured (a missing WG section, different evaluation sets)."""


class GateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    wg_source: Literal["open_set", "closed_set"] = "open_set"
    min_worst_group_accuracy: float | None = Field(None, ge=0, le=1)
    min_group_support: int | None = Field(None, ge=1)
    max_abs_bg_gap: float | None = Field(None, ge=0, le=1)
    max_abs_coobj_gap: float | None = Field(None, ge=0, le=1)
    max_abs_both_gap: float | None = Field(None, ge=0, le=1)
    must_beat_reference: bool = True
    reference_margin: float = Field(0.0, ge=0, le=1)
    max_regression_vs_production: float | None = Field(None, ge=0, le=1)
    max_validation_drop_vs_reference: float | None = Field(None, ge=0, le=1)


def load_gate_config(path: str | Path = DEFAULT_GATES_PATH) -> GateConfig:
    data = read_yaml_mapping(path, what="gate config")
    try:
        return GateConfig.model_validate(data)
    except ValidationError as error:
        raise UserError(describe_validation_error(error, what=f"gate config {path}", model=GateConfig)) from None


@dataclass(frozen=True)
class GateResult:
    name: str
    status: GateStatus
    value: Number | None
    threshold: Number | None
    comparison: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def title(self) -> str:
        return GATE_TITLES[self.name]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "value": self.value,
            "threshold": self.threshold,
            "comparison": self.comparison,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class GateReport:
    config: GateConfig
    results: list[GateResult]

    @property
    def failed(self) -> list[GateResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def skipped(self) -> list[GateResult]:
        return [r for r in self.results if r.status == "skipped"]

    @property
    def passed(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "config": self.config.model_dump(mode="json"),
            "gates": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> GateReport:
        """Inverse of :meth:`to_dict` (XCom and JSON files carry the dict)."""
        return cls(GateConfig.model_validate(document["config"]), [GateResult(**g) for g in document["gates"]])


def _compared(name: str, value: Number, comparison: str, threshold: Number, detail: str) -> GateResult:
    status: GateStatus = "passed" if COMPARISONS[comparison](value, threshold) else "failed"
    return GateResult(name, status, value, threshold, comparison, detail)


def _skipped(name: str, reason: str, comparison: str) -> GateResult:
    return GateResult(name, "skipped", None, None, comparison, reason)


def _wg_section(metrics: Mapping[str, Any], source: str, role: str) -> Mapping[str, Any]:
    section = metrics.get(source)
    if not section or "worst_group_accuracy" not in section:
        raise GateError(f"the {role} metrics have no {source} worst group; evaluate it with wg_source={source} groups")
    return section


def _check_same_evaluation(candidate: Mapping[str, Any], other: Mapping[str, Any], role: str) -> None:
    for key in EVALUATION_KEYS:
        if key in candidate and key in other and candidate[key] != other[key]:
            raise GateError(f"{role} was evaluated on another set ({key} {other[key]!r} vs {candidate[key]!r})")


def _wg_detail(wg: Mapping[str, Any]) -> str:
    return (
        f"worst group {wg.get('worst_group', '?')} (n={wg.get('worst_group_n', '?')}), "
        f"95% CI {wg['worst_group_ci_low']:.1%} to {wg['worst_group_ci_high']:.1%}"
    )


def _min_worst_group(wg: Mapping[str, Any], config: GateConfig) -> GateResult:
    name, threshold = "min_worst_group_accuracy", config.min_worst_group_accuracy
    if threshold is None:
        return _skipped(name, DISABLED, ">=")
    return _compared(name, wg["worst_group_accuracy"], ">=", threshold, _wg_detail(wg))


def _min_support(wg: Mapping[str, Any], config: GateConfig) -> GateResult:
    name, threshold = "min_group_support", config.min_group_support
    if threshold is None:
        return _skipped(name, DISABLED, ">=")
    return _compared(name, int(wg["worst_group_n"]), ">=", threshold, f"samples in worst group {wg.get('worst_group')}")


def _gap_gates(urbancars: Mapping[str, float] | None, config: GateConfig) -> list[GateResult]:
    results = []
    for name, key in GAP_GATES.items():
        threshold = getattr(config, name)
        if threshold is None:
            results.append(_skipped(name, DISABLED, "<="))
        elif not urbancars:
            results.append(_skipped(name, "the evaluation set has no UrbanCars-style bg/co-object attributes", "<="))
        elif urbancars[key] != urbancars[key]:  # NaN: blocked, as a gap nobody measured may be any size
            results.append(GateResult(name, "failed", None, threshold, "<=", f"the test split has no image of {key}'s "
                                      "cells, so it cannot be measured; add such images, or disable the gate"))
        else:
            gap = urbancars[key]
            detail = f"signed {key} {gap:+.1%} against I.D. accuracy {urbancars['id_accuracy']:.1%}"
            results.append(_compared(name, abs(gap), "<=", threshold, detail))
    return results


def _beat_reference(wg: Mapping[str, Any], reference_wg: Mapping[str, Any], config: GateConfig) -> GateResult:
    name = "must_beat_reference"
    if not config.must_beat_reference:
        return _skipped(name, DISABLED, ">")
    reference = reference_wg["worst_group_accuracy"]
    group = reference_wg.get("worst_group")
    detail = f"ERM reference WG {reference:.1%} ({group}) + margin {config.reference_margin:.1%}"
    return _compared(name, wg["worst_group_accuracy"], ">", reference + config.reference_margin, detail)


def _no_regression(wg: Mapping[str, Any], production: Mapping[str, Any] | None, config: GateConfig,
                   no_production: str) -> GateResult:
    name, tolerance = "max_regression_vs_production", config.max_regression_vs_production
    if tolerance is None:
        return _skipped(name, DISABLED, ">=")
    if production is None:
        return _skipped(name, no_production, ">=")
    production_wg = _wg_section(production, config.wg_source, "production")["worst_group_accuracy"]
    detail = (
        f"upper 95% CI bound of the candidate's WG ({wg['worst_group_accuracy']:.1%}) against production WG "
        f"{production_wg:.1%} - tolerance {tolerance:.1%}"
    )
    optimistic = max(wg["worst_group_ci_high"], wg["worst_group_accuracy"])
    return _compared(name, optimistic, ">=", production_wg - tolerance, detail)


def _validation_drop(candidate: Mapping[str, Any], reference: Mapping[str, Any], config: GateConfig) -> GateResult:
    name, tolerance = "max_validation_drop_vs_reference", config.max_validation_drop_vs_reference
    if tolerance is None:
        return _skipped(name, DISABLED, ">=")
    if "validation_accuracy" not in candidate or "validation_accuracy" not in reference:
        return _skipped(name, "the metrics have no validation accuracy (evaluated without a validation split)", ">=")
    ours, theirs = candidate["validation_accuracy"], reference["validation_accuracy"]
    detail = f"validation accuracy {ours:.1%} against the ERM reference's {theirs:.1%} - tolerance {tolerance:.1%}"
    return _compared(name, ours, ">=", theirs - tolerance, detail)


def evaluate_gates(
    candidate_metrics: Mapping[str, Any],
    reference_metrics: Mapping[str, Any],
    production_metrics: Mapping[str, Any] | None,
    config: GateConfig,
    *,
    no_production: str | None = None,
) -> GateReport:
    """Every gate of ``config`` on the candidate; raises :class:`GateError` when the inputs cannot be compared.
    ``no_production`` says why there are no production metrics where it is not that there is no production model."""
    wg = _wg_section(candidate_metrics, config.wg_source, "candidate")
    reference_wg = _wg_section(reference_metrics, config.wg_source, "reference")
    _check_same_evaluation(candidate_metrics, reference_metrics, "the ERM reference")
    if production_metrics is not None:
        _check_same_evaluation(candidate_metrics, production_metrics, "the production model")
    results = [
        _min_worst_group(wg, config),
        _min_support(wg, config),
        *_gap_gates(candidate_metrics.get("urbancars"), config),
        _beat_reference(wg, reference_wg, config),
        _no_regression(wg, production_metrics, config, no_production or "no production model yet"),
        _validation_drop(candidate_metrics, reference_metrics, config),
    ]
    return GateReport(config, results)
