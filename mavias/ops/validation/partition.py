"""Validate an incoming partition before anything trains on it (Great Expectations 1.x plus two size-aware checks).

Checks, each reported with its observed value and threshold:

- ``manifest_schema:<column>`` / ``not_null:<column>``: the required manifest columns exist and have no missing
  (or blank) values;
- ``non_empty``: at least one row;
- ``sample_id_unique``; ``split_values``: splits in train/val/test;
- ``labels_known_classes``: every label is a known class; new classes are an error, never a silent retrain;
- ``decode_rate`` and ``class_balance_drift`` (own checks, size-aware: :mod:`mavias.ops.validation.bounds`): the share
  of rows whose image decodes (:func:`mavias.core.manifest.quarantine.decode_problem`; undecodable rows are quarantined
  with their reason whether or not the partition passes), and the drift of the label distribution from the
  accumulated training set (skipped while there is none). The thresholds are :class:`ValidationSettings`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd

from mavias.core.manifest.io import REQUIRED_COLUMNS, SPLITS, read_manifest_table, resolve_uri
from mavias.core.manifest.quarantine import decode_problem
from mavias.ops.validation.bounds import ValidationSettings, decode_rate_check, drift_check
from mavias.ops.validation.checks import CheckResult, ValidationResult

DEFAULTS = ValidationSettings()
DETAIL_VALUES = 10  # how many offending values a check lists
OFFENDING_LABEL = {
    "labels_known_classes": "unknown classes",
    "split_values": "unknown splits",
    "sample_id_unique": "duplicated ids",
}


def _listed(values: Collection[Any]) -> str:
    values = sorted({str(v) for v in values})
    more = f" (+{len(values) - DETAIL_VALUES} more)" if len(values) > DETAIL_VALUES else ""
    return ", ".join(values[:DETAIL_VALUES]) + more


def _blanks_as_missing(df: pd.DataFrame) -> pd.DataFrame:
    """CSV manifests read blanks as ``""``; count them as missing like Parquet nulls."""
    df = df.copy()
    for col in REQUIRED_COLUMNS:
        if col in df.columns:
            df[col] = df[col].where(df[col].isna() | (df[col].astype(str).str.strip() != ""), None)
    return df


def _decode_problems(df: pd.DataFrame, manifest_dir: Path, left_out: Mapping[str, str]) -> pd.Series:
    """Per row: why its image is unusable, or ``None``."""
    if "uri" not in df.columns:
        return pd.Series(None, index=df.index, dtype=object)

    def problem(uri: Any) -> str | None:
        if pd.isna(uri):
            return "missing uri"
        return left_out.get(PurePosixPath(str(uri)).as_posix()) or decode_problem(resolve_uri(manifest_dir, uri))

    return df["uri"].map(problem)


def _expectations(df: pd.DataFrame, known_classes: Collection[str]) -> dict[str, Any]:
    """Check name -> GE expectation; column checks only for columns that exist (missing ones fail the schema)."""
    import great_expectations as gx

    ex = gx.expectations
    suite: dict[str, Any] = {f"manifest_schema:{col}": ex.ExpectColumnToExist(column=col) for col in REQUIRED_COLUMNS}
    present = [col for col in REQUIRED_COLUMNS if col in df.columns]
    suite |= {f"not_null:{col}": ex.ExpectColumnValuesToNotBeNull(column=col) for col in present}
    suite["non_empty"] = ex.ExpectTableRowCountToBeBetween(min_value=1)
    if "sample_id" in df.columns:
        suite["sample_id_unique"] = ex.ExpectColumnValuesToBeUnique(column="sample_id")
    if "split" in df.columns:
        suite["split_values"] = ex.ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS))
    if "label" in df.columns:
        suite["labels_known_classes"] = ex.ExpectColumnValuesToBeInSet(column="label", value_set=sorted(known_classes))
    return suite


def _run_great_expectations(df: pd.DataFrame, expectations: dict[str, Any]) -> list[CheckResult]:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        context.data_sources.add_pandas("manifest")
        .add_dataframe_asset("partition")
        .add_batch_definition_whole_dataframe("whole")
        .get_batch(batch_parameters={"dataframe": df})
    )
    suite = gx.ExpectationSuite(name="partition")
    for name, expectation in expectations.items():
        expectation.meta = {"check": name}
        suite.add_expectation(expectation)
    outcome = batch.validate(suite, result_format="COMPLETE")
    by_name = {r.expectation_config.meta["check"]: r for r in outcome.results}
    return [_check_from_ge(name, by_name[name]) for name in expectations]


def _check_from_ge(name: str, result: Any) -> CheckResult:
    """Observed value, threshold and a readable reason out of one GE expectation result."""
    config, payload = result.expectation_config, result.result
    if errors := _raised(result.exception_info or {}):
        return CheckResult(name, False, details=f"error: {'; '.join(errors)}")
    if config.type == "expect_column_to_exist":
        return CheckResult(name, result.success, result.success, True, "" if result.success else "column missing")
    if not result.success and not payload:  # a check GX could not compute, whatever it said of why
        return CheckResult(name, False, details="error: Great Expectations could not compute this check")
    if config.type == "expect_column_values_to_not_be_null":
        count = payload["unexpected_count"]
        return CheckResult(name, result.success, count, 0, f"{count} missing value(s)" if count else "")
    if "unexpected_list" in payload:
        offending = payload["unexpected_list"]
        details = f"{OFFENDING_LABEL[name]}: {_listed(offending)}" if offending else ""
        threshold = config.kwargs.get("value_set", 0)  # allowed values, or 0 offending rows for uniqueness
        return CheckResult(name, result.success, payload["unexpected_count"], threshold, details)
    observed, minimum = payload.get("observed_value"), config.kwargs.get("min_value")  # row count
    details = "" if result.success else f"observed {observed}, required at least {minimum}"
    return CheckResult(name, result.success, observed, minimum, details)


def _raised(exception_info: Mapping[str, Any]) -> list[str]:
    """The messages of what a GX check raised: at the top level, or (GX 1.x) keyed by each metric that failed."""
    infos = [exception_info, *(v for v in exception_info.values() if isinstance(v, Mapping))]
    return [str(info.get("exception_message")) for info in infos if info.get("raised_exception")]


def validate_partition(
    manifest_df: pd.DataFrame,
    manifest_dir: str | Path,
    known_classes: Collection[str],
    accumulated_class_counts: Mapping[str, int] | None = None,
    settings: ValidationSettings = DEFAULTS,
    left_out: Mapping[str, str] | None = None,
) -> ValidationResult:
    """Run every check on a raw (not yet normalised) manifest whose images are under ``manifest_dir``.

    Never raises on bad data: each problem is a failed check. Undecodable images are returned in
    ``quarantined`` (``sample_id``, ``uri``, ``reason``) whether or not the partition passes, as are the files
    ``left_out`` names (relative uri -> why they were not fetched), unread.
    """
    df = _blanks_as_missing(manifest_df).reset_index(drop=True)
    problems = _decode_problems(df, Path(manifest_dir), left_out or {})
    quarantined = df.loc[problems.notna()].reindex(columns=["sample_id", "uri"]).assign(reason=problems.dropna())
    checks = _run_great_expectations(df, _expectations(df, known_classes))
    if len(df) and "uri" in df.columns:
        checks.append(decode_rate_check(int(problems.isna().sum()), len(df), settings))
    if "label" in df.columns and len(df):
        checks.append(drift_check(df["label"].dropna(), accumulated_class_counts, settings))
    return ValidationResult(checks, quarantined.reset_index(drop=True), len(df))


def validate_manifest_file(
    manifest_path: str | Path,
    known_classes: Collection[str],
    accumulated_class_counts: Mapping[str, int] | None = None,
    settings: ValidationSettings = DEFAULTS,
    left_out: Mapping[str, str] | None = None,
) -> ValidationResult:
    """:func:`validate_partition` on a manifest file (e.g. from :func:`~mavias.ops.nightly.pull.pull_partition`)."""
    manifest_path = Path(manifest_path)
    df = read_manifest_table(manifest_path)
    return validate_partition(df, manifest_path.parent, known_classes, accumulated_class_counts, settings, left_out)
