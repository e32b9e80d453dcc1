"""Group metrics and evaluation protocols (open-set, closed-set CelebA / Waterbirds / UrbanCars)."""

from mavias.evaluate.metrics import (
    MIN_SUPPORT,
    WorstGroup,
    accuracy,
    average_accuracy,
    correctness,
    format_group_key,
    group_key,
    group_table,
    worst_group,
)
from mavias.evaluate.protocols import (
    as_bool,
    bias_conflicting_accuracy,
    celeba_metrics,
    evaluation_report,
    find_biased_tags,
    imagenet9_metrics,
    openset_evaluation,
    openset_groups,
    unbiased_accuracy,
    urbancars_metrics,
    write_evaluation,
)

__all__ = [
    "MIN_SUPPORT",
    "WorstGroup",
    "accuracy",
    "as_bool",
    "average_accuracy",
    "bias_conflicting_accuracy",
    "celeba_metrics",
    "correctness",
    "evaluation_report",
    "find_biased_tags",
    "format_group_key",
    "group_key",
    "group_table",
    "imagenet9_metrics",
    "openset_evaluation",
    "openset_groups",
    "unbiased_accuracy",
    "urbancars_metrics",
    "worst_group",
    "write_evaluation",
]
