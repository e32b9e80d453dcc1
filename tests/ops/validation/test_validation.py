"""Partition validation (Great Expectations and the size-aware checks) and the sense -> pull -> validate -> quarantine
flow on moto_server."""

from __future__ import annotations

import json

import pytest

from mavias.ops.nightly.incoming import ProcessedLedger
from mavias.ops.nightly.ingest import quarantine_partition
from mavias.ops.nightly.pull import pull_partition
from mavias.ops.validation import (
    ValidationSettings,
    validate_manifest_file,
    validate_partition,
)
from mavias.ops.validation.bounds import drift_lower_bound, interval, upper_bound
from tests.support.s3server import (  # noqa: F401 - fixtures
    moto_endpoint,
    s3_client,
    s3_settings,
    seed_partition,
    write_local_partition,
)

CLASSES = ["cat", "dog"]
BALANCED = ["cat", "dog"] * 3
LENIENT = ValidationSettings(min_decode_rate=0.8)


def _failed(result) -> list[str]:
    return [c.name for c in result.failed]


def test_clean_partition_passes_every_check(tmp_path):
    manifest = write_local_partition(tmp_path, BALANCED)
    result = validate_partition(manifest, tmp_path, CLASSES, {"cat": 10, "dog": 10})
    assert result.success, result.summary()
    names = {c.name for c in result.checks}
    assert {"non_empty", "sample_id_unique", "labels_known_classes", "decode_rate", "class_balance_drift"} <= names
    assert result.quarantined.empty
    json.dumps(result.to_dict())


def test_corrupt_images_are_quarantined_and_the_rest_kept(tmp_path):
    manifest = write_local_partition(tmp_path, BALANCED, corrupt=1)
    result = validate_partition(manifest, tmp_path, CLASSES, settings=LENIENT)
    assert result.success, result.summary()
    assert result.quarantined["sample_id"].tolist() == [manifest["sample_id"][0]]
    assert result.quarantined["reason"][0].startswith("cannot decode")


def test_too_many_undecodable_images_fail(tmp_path):
    manifest = write_local_partition(tmp_path, ["cat", "dog"] * 25, corrupt=20)  # 60%: below 80% beyond chance
    result = validate_partition(manifest, tmp_path, CLASSES, settings=LENIENT)
    assert _failed(result) == ["decode_rate"]
    assert len(result.quarantined) == 20 and "at most" in result.summary()


def test_the_decode_rate_is_judged_by_its_confidence_bound_not_its_point_ratio(tmp_path):
    """Two bad images of six (67%) are within chance of an 80% source; the same share of fifty is not."""
    small = validate_partition(write_local_partition(tmp_path / "s", BALANCED, corrupt=2), tmp_path / "s", CLASSES,
                               settings=LENIENT)
    assert small.success, small.summary()
    check = next(c for c in small.checks if c.name == "decode_rate")
    assert check.observed == pytest.approx(4 / 6, abs=1e-4) and "within chance for 6 images" in check.details
    large = validate_partition(write_local_partition(tmp_path / "l", ["cat", "dog"] * 25, corrupt=17),
                               tmp_path / "l", CLASSES, settings=LENIENT)
    assert _failed(large) == ["decode_rate"]


def test_a_partial_partition_keeps_its_decodable_images_when_the_config_allows(tmp_path):
    manifest = write_local_partition(tmp_path, ["cat", "dog"] * 25, corrupt=20)
    result = validate_partition(manifest, tmp_path, CLASSES, settings=LENIENT.model_copy(update={"keep_partial": True}))
    assert result.success and _failed(result) == [] and [c.name for c in result.warnings] == ["decode_rate"]
    assert len(result.quarantined) == 20  # held back, each with its reason
    assert "kept 30 of 50 image(s), held back 20" in result.summary()
    assert result.to_dict()["warnings"] == ["decode_rate"]


def test_clopper_pearson_bounds_against_known_values():
    assert upper_bound(0, 10, 0.95) == pytest.approx(1 - 0.05 ** (1 / 10))  # closed form at zero successes
    assert upper_bound(10, 10, 0.95) == 1.0
    low, high = interval(0, 20, 0.05)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 20))
    assert interval(5, 10, 0.05) == pytest.approx((0.187086, 0.812914), abs=1e-6)  # textbook value
    # no sample can tell a distribution apart: the bound is 0; a large one that matches exactly: 0 as well
    assert drift_lower_bound({"a": 1}, {"a": 0.5, "b": 0.5}, 0.95) == 0.0
    assert drift_lower_bound({"a": 500, "b": 500}, {"a": 0.5, "b": 0.5}, 0.95) == 0.0
    # 1000 of class a only against a 50/50 set: the bound is close to the true TVD 0.5
    assert drift_lower_bound({"a": 1000}, {"a": 0.5, "b": 0.5}, 0.95) == pytest.approx(0.5, abs=0.01)


def test_empty_partition_fails(tmp_path):
    result = validate_partition(write_local_partition(tmp_path, []), tmp_path, CLASSES)
    assert _failed(result) == ["non_empty"]


def test_unknown_class_fails_and_is_named(tmp_path):
    manifest = write_local_partition(tmp_path, ["cat", "dog", "zebra", "zebra"])
    result = validate_partition(manifest, tmp_path, CLASSES)
    assert _failed(result) == ["labels_known_classes"]
    assert "zebra" in result.failed[0].details and "zebra" in result.summary()


def test_schema_problems_are_reported_not_raised(tmp_path):
    manifest = write_local_partition(tmp_path, BALANCED)
    manifest.loc[1, "sample_id"] = manifest.loc[0, "sample_id"]
    manifest.loc[2, "label"] = " "
    result = validate_partition(manifest.drop(columns="split"), tmp_path, CLASSES)
    assert set(_failed(result)) == {"manifest_schema:split", "sample_id_unique", "not_null:label"}


@pytest.mark.parametrize(("labels", "passes", "tvd"), [
    (BALANCED, True, 0.0),
    (["cat"] * 9 + ["dog"], True, 0.4),  # 10 images: 90/10 is within chance of 50/50
    (["cat"] * 180 + ["dog"] * 20, False, 0.4),  # 200 images: it is not
])
def test_class_balance_drift_is_judged_by_its_confidence_bound(tmp_path, labels, passes, tvd):
    manifest = write_local_partition(tmp_path, labels)
    result = validate_partition(manifest, tmp_path, CLASSES, {"cat": 50, "dog": 50})
    drift = next(c for c in result.checks if c.name == "class_balance_drift")
    assert drift.success is passes and result.success is passes
    assert drift.observed == pytest.approx(tvd)


def test_a_partition_missing_a_class_is_accepted_unless_the_config_forbids_it(tmp_path):
    manifest = write_local_partition(tmp_path, ["cat"] * 60)
    accumulated = {"cat": 500, "dog": 500}
    allowed = validate_partition(manifest, tmp_path, CLASSES, accumulated)
    drift = next(c for c in allowed.checks if c.name == "class_balance_drift")
    assert allowed.success and drift.details == "lacks class(es) dog (allowed)"
    strict = ValidationSettings(allow_missing_classes=False)
    refused = validate_partition(manifest, tmp_path, CLASSES, accumulated, strict)
    assert _failed(refused) == ["class_balance_drift"] and "lacks class(es) dog;" in refused.summary()


def test_nightly_intake_quarantines_bad_partitions_and_processes_the_rest(s3_client, s3_settings, tmp_path):
    seed_partition(s3_client, s3_settings, "p1-good", BALANCED, corrupt=1)
    seed_partition(s3_client, s3_settings, "p2-empty", [])
    seed_partition(s3_client, s3_settings, "p3-new-class", ["cat", "dog", "zebra"], manifest_format="csv")
    ledger = ProcessedLedger(s3_client, s3_settings)

    trainable = {}
    for partition in ledger.new_partitions():
        manifest_path = pull_partition(s3_client, s3_settings, partition, tmp_path / partition)
        result = validate_manifest_file(manifest_path, CLASSES, settings=LENIENT)
        if result.success:
            trainable[partition] = result
            ledger.mark_processed(partition, {"quarantined_images": len(result.quarantined)})
        else:
            quarantine_partition(s3_client, s3_settings, partition, result)

    assert list(trainable) == ["p1-good"] and len(trainable["p1-good"].quarantined) == 1
    record = s3_client.get_object(Bucket=s3_settings.bucket, Key="quarantine/p3-new-class/validation.json")
    report = json.loads(record["Body"].read())
    assert report["failed"] == ["labels_known_classes"] and "zebra" in report["summary"]
    assert ledger.quarantined() == {"p2-empty", "p3-new-class"}
    assert ledger.new_partitions() == []


@pytest.mark.parametrize("exception_info", [
    {"column_values.in_set.unexpected_count": {"raised_exception": True, "exception_message": "boom",
                                               "exception_traceback": "tb"}},  # GX 1.x: keyed by the failing metric
    {"raised_exception": True, "exception_message": "boom", "exception_traceback": "tb"},
])
def test_a_check_great_expectations_could_not_compute_fails_naming_why(exception_info):
    from great_expectations.core import ExpectationValidationResult
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    from mavias.ops.validation.partition import _check_from_ge

    config = ExpectationConfiguration(type="expect_column_values_to_be_in_set",
                                      kwargs={"column": "label", "value_set": ["cat"]})
    result = ExpectationValidationResult(success=False, expectation_config=config, result={},
                                         exception_info=exception_info)
    check = _check_from_ge("labels_known_classes", result)
    assert not check.success and check.details == "error: boom"
