"""Validated partitions pinned at the ETags they were validated at, against a real S3 server (moto on loopback): a
file changed in the bucket afterwards never trains unvalidated, a forced revalidation and a marker of an older
version are pinned at what was validated, and a file the producer took down is not validated from an old copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mavias.core.manifest.io import read_manifest_table
from mavias.ops.nightly import ingest, layout, revalidation
from mavias.ops.nightly.incoming import ProcessedLedger
from mavias.ops.nightly.pull import PartitionChanged
from mavias.storage.s3 import S3Settings
from tests.ops.nightly.test_faults import CLASSES, NIGHT, _config, _seed_evaluation
from tests.support.s3server import (  # noqa: F401 - fixtures
    moto_endpoint,
    png_bytes,
    s3_client,
    s3_settings,
    seed_partition,
)


def _validated_p1(s3_client, s3_settings: S3Settings, workspace: Path, *, record: bool = True):  # noqa: ANN001, ANN202
    """The evaluation set and partition p1 (30 images) in the bucket, validated in ``workspace`` (and recorded
    processed): (config, p1's manifest, the night's validation)."""
    _seed_evaluation(s3_client, s3_settings)
    manifest = seed_partition(s3_client, s3_settings, "p1", CLASSES * 10)
    cfg = _config(s3_settings, workspace)
    first = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    if record:
        ingest.record_processed(cfg, {"night": first["night"], "new": first["valid"]})
    return cfg, manifest, first


def test_a_processed_partition_changed_in_the_bucket_trains_as_validated_or_not_at_all(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    """Each file is pinned at the ETag it was validated at: a later change never enters training unvalidated."""
    cfg, manifest, _ = _validated_p1(s3_client, s3_settings, tmp_path / "ws")
    marker = ProcessedLedger(s3_client, s3_settings).marker("p1")
    assert len(marker["etags"]) == len(manifest) + 1  # every image and the manifest
    swapped = f"incoming/p1/{manifest['uri'][3]}"
    validated_bytes = s3_client.get_object(Bucket=s3_settings.bucket, Key=swapped)["Body"].read()
    s3_client.put_object(Bucket=s3_settings.bucket, Key=swapped, Body=png_bytes("a changed image"))

    same_workspace = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))  # it holds the validated copy
    assert same_workspace["changed"] == {} and same_workspace["partitions"] == ["p1"]
    pulled = layout.pull(cfg, s3_client, "p1")
    assert (pulled.parent / manifest["uri"][3]).read_bytes() == validated_bytes

    fresh = _config(s3_settings, tmp_path / "fresh")  # a new workspace learns the pins from the ledger
    refused = ingest.pull_and_validate(fresh, ingest.sense(fresh, NIGHT))
    assert refused["partitions"] == [] and manifest["uri"][3] in refused["changed"]["p1"]
    assert "s3://" in refused["changed"]["p1"] and "processed/p1.json" in refused["changed"]["p1"]
    with pytest.raises(PartitionChanged, match="1 file"):
        layout.pull(fresh, s3_client, "p1")
    s3_client.put_object(Bucket=s3_settings.bucket, Key=swapped, Body=validated_bytes)  # restored: taken again
    assert ingest.pull_and_validate(fresh, ingest.sense(fresh, NIGHT))["partitions"] == ["p1"]


def test_a_forced_revalidation_and_a_marker_of_an_older_version_pin_what_was_validated(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg, manifest, first = _validated_p1(s3_client, s3_settings, tmp_path / "ws", record=False)
    ledger = ProcessedLedger(s3_client, s3_settings)
    ledger.mark_processed("p1", {"night": first["night"]})  # as versions before pins recorded it
    ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    assert len(ledger.marker("p1")["etags"]) == len(manifest) + 1  # pinned at what the workspace pulled

    key = f"incoming/p1/{manifest['uri'][2]}"
    s3_client.put_object(Bucket=s3_settings.bucket, Key=key, Body=png_bytes("a replacement"))
    forced = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT, force_partition="p1"))
    assert forced["valid"] == ["p1"]  # validated again: the marker now pins the new contents
    assert ledger.marker("p1")["etags"][manifest["uri"][2]] == s3_client.head_object(
        Bucket=s3_settings.bucket, Key=key)["ETag"]
    fresh = _config(s3_settings, tmp_path / "fresh")
    assert ingest.pull_and_validate(fresh, ingest.sense(fresh, NIGHT))["changed"] == {}


def test_a_forced_revalidation_that_fails_keeps_the_validated_copy_training(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg, manifest, _ = _validated_p1(s3_client, s3_settings, tmp_path / "ws")
    local = tmp_path / "ws" / "partitions" / "p1"
    validated = {name: (local / name).read_bytes() for name in manifest["uri"]}
    seed_partition(s3_client, s3_settings, "p1", ["car", "zebra"])  # new contents with a class nobody knows
    forced = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT, force_partition="p1"))
    assert forced["failed"] == ["p1"] and forced["partitions"] == ["p1"]  # tonight too, as validated
    assert {name: (local / name).read_bytes() for name in manifest["uri"]} == validated  # untouched
    assert not (tmp_path / "ws" / "revalidation" / "p1").exists()
    s3_client.delete_object(Bucket=s3_settings.bucket, Key="quarantine/p1/validation.json")
    later = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    assert later["partitions"] == ["p1"] and later["changed"] == {}  # trains on what was validated
    assert read_manifest_table(layout.pull(cfg, s3_client, "p1"))["label"].tolist() == manifest["label"].tolist()


def test_a_file_the_producer_took_down_is_not_validated_from_an_earlier_copy(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    _seed_evaluation(s3_client, s3_settings)
    manifest = seed_partition(s3_client, s3_settings, "p1", CLASSES * 20)
    s3_client.put_object(Bucket=s3_settings.bucket, Key="incoming/p1/_SUCCESS", Body=b"")
    cfg = _config(s3_settings, tmp_path / "ws")
    local = layout.pull(cfg, s3_client, "p1", pinned=False).parent
    s3_client.delete_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{manifest['uri'][4]}")
    validated = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    assert not (local / manifest["uri"][4]).exists()
    quarantined = json.loads(Path(validated["validations"]["p1"]["path"]).read_text())["quarantined"]
    assert [(row["uri"], row["reason"]) for row in quarantined] == [(manifest["uri"][4], "file not found")]


@pytest.mark.parametrize("cut_after", ["first rename", "both renames"])
def test_a_replacement_cut_off_between_its_renames_is_finished_by_the_next_night(tmp_path: Path, cut_after: str) -> None:
    folder, staging = tmp_path / "partitions" / "p1", tmp_path / "revalidation" / "p1"
    for path, text in ((folder, "validated"), (staging, "validated again")):
        path.mkdir(parents=True)
        (path / "manifest.csv").write_text(text)
    revalidation.adopt(folder, staging)  # the whole replacement, then undo the parts a cut-off night never did
    aside = tmp_path / "revalidation" / "_replaced-p1"
    aside.mkdir()
    (aside / "manifest.csv").write_text("validated")
    if cut_after == "first rename":
        folder.rename(staging)
    revalidation.recover(folder, staging)
    assert (folder / "manifest.csv").read_text() == "validated again"
    assert not aside.exists() and not staging.exists()
