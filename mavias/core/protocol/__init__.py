"""The paper's protocols, shared by the command line, the benchmarks, the audit and the nightly pipeline:

1. an ERM *reference* model, selected by validation accuracy (paper, open-set protocol), and its biased tags B' on
   the validation split (:mod:`~mavias.core.protocol.reference`);
2. any method trained on a resolved recipe and selected without bias labels (:mod:`~mavias.core.protocol.runs`);
3. a checkpoint evaluated on a split: open-set groups from B', closed-set groups from attributes when present
   (:mod:`~mavias.core.protocol.evaluation`).
"""

from mavias.core.protocol.evaluation import (
    BG_ALIGNED,
    CO_ALIGNED,
    aligned_values,
    evaluate_checkpoint,
    training_proportions,
    write_run_evaluation,
)
from mavias.core.protocol.reference import (
    BIASED_TAGS_FILE,
    DISCOVERY_FILE,
    EVIDENCE_FILE,
    PAPER_TAGS_FILE,
    RULES,
    Reference,
    compute_biased_tags,
    empty_reason,
    load_reference,
    reference_checkpoint,
    tag_groups,
)
from mavias.core.protocol.runs import resolve_run, train_method, train_reference

__all__ = [
    "BG_ALIGNED",
    "BIASED_TAGS_FILE",
    "CO_ALIGNED",
    "DISCOVERY_FILE",
    "EVIDENCE_FILE",
    "PAPER_TAGS_FILE",
    "RULES",
    "Reference",
    "aligned_values",
    "compute_biased_tags",
    "empty_reason",
    "evaluate_checkpoint",
    "load_reference",
    "reference_checkpoint",
    "resolve_run",
    "tag_groups",
    "train_method",
    "train_reference",
    "training_proportions",
    "write_run_evaluation",
]
