"""Validation of an incoming partition before anything trains on it (Great Expectations); see
:mod:`mavias.validation.partition` for the checks."""

from mavias.validation.partition import (
    CheckResult,
    ValidationResult,
    class_distribution_distance,
    validate_manifest_file,
    validate_partition,
)

__all__ = ["CheckResult", "ValidationResult", "class_distribution_distance", "validate_manifest_file",
           "validate_partition"]
