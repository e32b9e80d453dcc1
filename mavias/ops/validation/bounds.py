"""The size-aware checks of a partition: its decode rate and its class balance, each judged by a confidence bound,
so a small partition is not failed by the noise of a few images (a point ratio is).

- ``decode_rate``: the partition fails when the one-sided Clopper-Pearson upper bound of its decode rate is below
  ``min_decode_rate``: when even the optimistic end is too low, the source is broken, not unlucky.
- ``class_balance_drift``: the total variation distance (TVD) ``0.5 * sum_c |p_c - q_c|`` between the partition's
  label distribution ``p`` and the accumulated training set's ``q``; the partition fails when the lowest TVD
  consistent with simultaneous Clopper-Pearson intervals of every ``p_c`` (Bonferroni over the classes) exceeds
  ``max_class_drift``. With ``allow_missing_classes`` a class the partition lacks is left out of ``q`` (renormalised).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from mavias.ops.validation.checks import CheckResult


class ValidationSettings(BaseModel):
    """The thresholds of a partition's checks (the nightly config's ``validation`` section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_decode_rate: float = Field(0.98, gt=0, le=1, description="fail when the decode rate is below this even at "
                                   "the upper end of its confidence interval")
    max_class_drift: float = Field(0.25, ge=0, le=1, description="fail when the class-balance TVD from the "
                                   "accumulated training set exceeds this even at the lower end of its interval")
    confidence: float = Field(0.95, ge=0.5, lt=1, description="confidence of both bounds")
    keep_partial: bool = Field(False, description="a partition failing only on its decode rate keeps its decodable "
                               "images (the others are held back with their reasons) instead of being quarantined whole")
    allow_missing_classes: bool = Field(True, description="a partition may lack classes: the drift is measured over "
                                        "the classes it has")
    max_upload_wait_h: float = Field(24.0, ge=0, description="a partition whose manifest names files the bucket "
                                     "lacks (and has no _SUCCESS marker) waits this long after its manifest for them; "
                                     "then the missing files are held back as undecodable")


def upper_bound(successes: int, n: int, confidence: float) -> float:
    """One-sided Clopper-Pearson upper bound of a binomial proportion."""
    from scipy.stats import beta  # scipy only where a bound is computed (the nightly config imports this module)

    return 1.0 if successes >= n else float(beta.ppf(confidence, successes + 1, n - successes))


def interval(successes: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval at level ``1 - alpha``."""
    from scipy.stats import beta

    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, n - successes + 1))
    high = 1.0 if successes == n else float(beta.ppf(1 - alpha / 2, successes + 1, n - successes))
    return low, high


def decode_rate_check(decodable: int, n: int, settings: ValidationSettings) -> CheckResult:
    rate, bound, minimum = decodable / n, upper_bound(decodable, n, settings.confidence), settings.min_decode_rate
    counts = f"{n - decodable} of {n} image(s) undecodable: decode rate {rate:.1%}"
    if bound >= minimum:
        details = "" if rate >= minimum else (f"{counts}, below {minimum:.0%} but within chance for {n} images "
                                               f"({settings.confidence:.0%} upper bound {bound:.1%})")
        return CheckResult("decode_rate", True, round(rate, 4), minimum, details, "mavias")
    details = f"{counts}, at most {bound:.1%} with {settings.confidence:.0%} confidence, below the required {minimum:.0%}"
    if settings.keep_partial:
        details += "; the decodable images are kept (validation.keep_partial)"
    return CheckResult("decode_rate", False, round(rate, 4), minimum, details, "mavias",
                       blocking=not settings.keep_partial)


def drift_lower_bound(counts: Mapping[str, int], expected: Mapping[str, float], confidence: float) -> float:
    """The smallest TVD between ``expected`` and any distribution inside the simultaneous intervals of ``counts``."""
    classes = sorted(set(counts) | set(expected))
    n, alpha = sum(counts.values()), (1 - confidence) / len(classes)
    gaps = []
    for name in classes:
        low, high = interval(counts.get(name, 0), n, alpha)
        q = expected.get(name, 0.0)
        gaps.append(max(0.0, low - q, q - high))
    return 0.5 * sum(gaps)


def drift_check(labels: pd.Series, accumulated: Mapping[str, int] | None, settings: ValidationSettings) -> CheckResult:
    maximum = settings.max_class_drift
    if not accumulated or sum(accumulated.values()) == 0:
        return CheckResult("class_balance_drift", True, None, maximum, "no accumulated training set yet", "mavias")
    counts = labels.value_counts().to_dict()
    missing = sorted(c for c, k in accumulated.items() if k > 0 and c not in counts)
    kept = {c: k for c, k in accumulated.items() if c in counts or not settings.allow_missing_classes}
    total = sum(kept.values())
    if total == 0:
        return CheckResult("class_balance_drift", True, None, maximum, "no class in common with the accumulated "
                           "training set", "mavias")
    expected = {c: k / total for c, k in kept.items()}
    n = sum(counts.values())
    observed = 0.5 * sum(abs(counts.get(c, 0) / n - expected.get(c, 0.0)) for c in set(counts) | set(expected))
    bound = drift_lower_bound(counts, expected, settings.confidence)
    notes = [f"lacks class(es) {', '.join(missing)}" + (" (allowed)" if settings.allow_missing_classes else "")
             ] if missing else []
    if bound > maximum:
        notes.append(f"label distribution differs from the accumulated training set: TVD {observed:.2f}, at least "
                     f"{bound:.2f} with {settings.confidence:.0%} confidence, above {maximum:.2f}")
    return CheckResult("class_balance_drift", bound <= maximum, round(observed, 4), maximum, "; ".join(notes), "mavias")
