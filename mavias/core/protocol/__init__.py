"""The paper's protocols, shared by the command line, the benchmarks, the audit and the nightly pipeline:

1. an ERM *reference* model, selected by validation accuracy (paper, open-set protocol), and its biased tags B' on
   the validation split (:mod:`~mavias.core.protocol.reference`);
2. any method trained on a resolved recipe and selected without bias labels (:mod:`~mavias.core.protocol.runs`);
3. a checkpoint evaluated on a split: open-set groups from B', closed-set groups from attributes when present
   (:mod:`~mavias.core.protocol.evaluation`).
"""

# The names below load their module on first use (PEP 562): the run-folder files (``reference_files``) are read by
# light tasks (the night's report) that must not pay for importing torch through this package.
from importlib import import_module
from typing import Any

_HOMES = {
    "evaluation": ("BG_ALIGNED", "CO_ALIGNED", "aligned_values", "evaluate_checkpoint", "training_proportions",
                   "write_run_evaluation"),
    "reference": ("RULES", "Reference", "compute_biased_tags", "empty_reason", "load_reference", "reference_checkpoint",
                  "tag_groups"),
    "reference_files": ("BIASED_TAGS_FILE", "DISCOVERY_FILE", "EVIDENCE_FILE", "PAPER_TAGS_FILE", "rule_version"),
    "runs": ("require_reference_for_selection", "resolve_run", "train_method", "train_reference"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    if name not in _HOME_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOME_OF[name]}"), name)
    globals()[name] = value
    return value
