"""Group metrics, label-free shortcut discovery (B') and the evaluation protocols (open-set, closed-set CelebA /
Waterbirds / UrbanCars / ImageNet-9)."""

from mavias.core.evaluate.dataset_metrics import (
    as_bool,
    bias_conflicting_accuracy,
    celeba_metrics,
    evaluation_report,
    imagenet9_metrics,
    unbiased_accuracy,
    urbancars_metrics,
    write_evaluation,
)
from mavias.core.evaluate.metrics import (
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
from mavias.core.evaluate.openset import decoy_groups, find_biased_tags, openset_groups, openset_report
from mavias.core.evaluate.shortcuts import find_shortcuts

__all__ = [
    "MIN_SUPPORT",
    "WorstGroup",
    "accuracy",
    "as_bool",
    "average_accuracy",
    "bias_conflicting_accuracy",
    "celeba_metrics",
    "correctness",
    "decoy_groups",
    "evaluation_report",
    "find_biased_tags",
    "find_shortcuts",
    "format_group_key",
    "group_key",
    "group_table",
    "imagenet9_metrics",
    "openset_groups",
    "openset_report",
    "unbiased_accuracy",
    "urbancars_metrics",
    "worst_group",
    "write_evaluation",
]
