"""Partition validation (Great Expectations) and the sense -> pull -> validate -> quarantine flow on moto_server."""

from __future__ import annotations

import json

import pytest

from mavias.nightly.incoming import ProcessedLedger, pull_partition
from mavias.nightly.ingest import quarantine_partition
from mavias.validation import class_distribution_distance, validate_manifest_file, validate_partition
from tests.pipeline.s3server import (  # noqa: F401 - fixtures
    moto_endpoint,
    s3_client,
    s3_settings,
    seed_partition,
    write_local_partition,
)

CLASSES = ["cat", "dog"]
BALANCED = ["cat", "dog"] * 3


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
    result = validate_partition(manifest, tmp_path, CLASSES, min_decode_rate=0.8)
    assert result.success, result.summary()
    assert result.quarantined["sample_id"].tolist() == [manifest["sample_id"][0]]
    assert result.quarantined["reason"][0].startswith("cannot decode")


def test_too_many_undecodable_images_fail(tmp_path):
    manifest = write_local_partition(tmp_path, BALANCED, corrupt=2)
    result = validate_partition(manifest, tmp_path, CLASSES, min_decode_rate=0.8)
    assert _failed(result) == ["decode_rate"]
    assert len(result.quarantined) == 2


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


@pytest.mark.parametrize(("labels", "passes"), [(BALANCED, True), (["cat"] * 6, False)])
def test_class_balance_drift(tmp_path, labels, passes):
    manifest = write_local_partition(tmp_path, labels)
    result = validate_partition(manifest, tmp_path, CLASSES, {"cat": 50, "dog": 50}, max_class_drift=0.25)
    drift = next(c for c in result.checks if c.name == "class_balance_drift")
    assert drift.success is passes and result.success is passes
    assert drift.observed == pytest.approx(0.0 if passes else 0.5)


def test_total_variation_distance():
    import pandas as pd

    assert class_distribution_distance(pd.Series(["a", "a", "b", "b"]), {"a": 1, "b": 1}) == 0
    assert class_distribution_distance(pd.Series(["c"]), {"a": 3, "b": 1}) == 1


def test_nightly_intake_quarantines_bad_partitions_and_processes_the_rest(s3_client, s3_settings, tmp_path):
    seed_partition(s3_client, s3_settings, "p1-good", BALANCED, corrupt=1)
    seed_partition(s3_client, s3_settings, "p2-empty", [])
    seed_partition(s3_client, s3_settings, "p3-new-class", ["cat", "dog", "zebra"], manifest_format="csv")
    ledger = ProcessedLedger(s3_client, s3_settings)

    trainable = {}
    for partition in ledger.new_partitions():
        manifest_path = pull_partition(s3_client, s3_settings, partition, tmp_path / partition)
        result = validate_manifest_file(manifest_path, CLASSES, min_decode_rate=0.8)
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
