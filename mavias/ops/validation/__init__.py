"""Validation of an incoming partition before anything trains on it (Great Expectations plus size-aware checks);
see :mod:`mavias.ops.validation.partition` for the checks and :mod:`mavias.ops.validation.bounds` for their thresholds."""

from mavias.ops.validation.bounds import ValidationSettings
from mavias.ops.validation.checks import CheckResult, ValidationResult
from mavias.ops.validation.partition import validate_manifest_file, validate_partition

__all__ = ["CheckResult", "ValidationResult", "ValidationSettings", "validate_manifest_file", "validate_partition"]
