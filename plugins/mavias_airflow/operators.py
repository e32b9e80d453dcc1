"""Operators: the promotion quality gates as a reusable task."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from mavias.ops.gates import DEFAULT_GATES_PATH, evaluate_gates, load_gate_config
from mavias.utils.atomic import write_json
from mavias_airflow.stages import stage_errors


def _read_json(path: str | None) -> dict[str, Any] | None:
    return json.loads(Path(path).read_text()) if path else None


class QualityGateOperator(BaseOperator):
    """Gate a candidate's metrics (``metrics.json`` of ``mavias.core.protocol.write_run_evaluation``) against the ERM
    reference's and, when given, production's, with the versioned gate YAML.

    Returns the gate report as a dict (``passed``, ``config``, ``gates``) plus ``inputs``: the metrics files it
    judged. With ``fail_on_block`` a failed gate fails the task; otherwise the caller decides (e.g. a short circuit
    before promotion) and the report explains.
    """

    template_fields: Sequence[str] = ("candidate_metrics", "reference_metrics", "production_metrics",
                                      "production_not_compared", "output_path")
    ui_color = "#fde68a"

    def __init__(
        self,
        *,
        candidate_metrics: str,
        reference_metrics: str,
        production_metrics: str | None = None,
        production_not_compared: str | None = None,
        gates_path: str | Path = DEFAULT_GATES_PATH,
        output_path: str | None = None,
        fail_on_block: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.candidate_metrics = candidate_metrics
        self.reference_metrics = reference_metrics
        self.production_metrics = production_metrics
        self.production_not_compared = production_not_compared  # why production has no metrics though there is one
        self.gates_path = str(gates_path)
        self.output_path = output_path
        self.fail_on_block = fail_on_block

    def execute(self, context: Context) -> dict[str, Any]:
        with stage_errors():  # a broken gates file is one line in the night's report, not retried
            return self._gate()

    def _gate(self) -> dict[str, Any]:
        report = evaluate_gates(
            _read_json(self.candidate_metrics),
            _read_json(self.reference_metrics),
            _read_json(self.production_metrics),
            load_gate_config(self.gates_path),
            no_production=self.production_not_compared or None,
        )
        for gate in report.results:
            self.log.info("gate %-30s %-7s value=%s threshold=%s %s", gate.name, gate.status, gate.value,
                          gate.threshold, gate.detail)
        inputs = {"candidate": self.candidate_metrics, "reference": self.reference_metrics,
                  "production": self.production_metrics, "gates_path": self.gates_path}
        result = report.to_dict() | {"inputs": inputs}
        if self.output_path:
            write_json(self.output_path, result)
        if self.fail_on_block and not report.passed:
            raise AirflowFailException(f"quality gates failed: {', '.join(g.name for g in report.failed)}")
        return result
