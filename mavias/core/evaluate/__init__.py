"""Group metrics, label-free shortcut discovery (B') and the evaluation protocols (open-set, closed-set CelebA /
Waterbirds / UrbanCars / ImageNet-9).

The names below load with their module on first use, so that importing one light module of the package (the
metrics' constants, for a command's option defaults) does not import scipy's statistics.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    **dict.fromkeys(("as_bool", "bias_conflicting_accuracy", "celeba_metrics", "evaluation_report",
                     "imagenet9_metrics", "unbiased_accuracy", "urbancars_metrics"),
                    "dataset_metrics"),
    **dict.fromkeys(("MIN_SUPPORT", "WorstGroup", "accuracy", "average_accuracy", "correctness", "format_group_key",
                     "group_key", "group_table", "worst_group"), "metrics"),
    **dict.fromkeys(("decoy_groups", "find_biased_tags", "openset_groups", "openset_report"), "openset"),
    "find_shortcuts": "shortcuts",
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
