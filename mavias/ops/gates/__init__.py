"""Promotion quality gates: a candidate's metrics against the ERM reference's and production's, from a versioned
YAML (``gates_default.yaml``); the rules are described in :mod:`mavias.ops.gates.rules`."""

from mavias.ops.gates.rules import (
    DEFAULT_GATES_PATH,
    GateConfig,
    GateError,
    GateReport,
    GateResult,
    evaluate_gates,
    load_gate_config,
)

__all__ = [
    "DEFAULT_GATES_PATH",
    "GateConfig",
    "GateError",
    "GateReport",
    "GateResult",
    "evaluate_gates",
    "load_gate_config",
]
