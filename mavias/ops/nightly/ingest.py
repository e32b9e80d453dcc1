"""Ingest: which partitions are new tonight (``sense``), pulling and validating them with the evaluation set
(``pull_and_validate``), and, at the end of the night, marking them processed (``record_processed``).

Only bad data is quarantined (``quarantine/<partition>/validation.json``); a transient storage error (timeout,
refused connection, 5xx, throttling) is retried with backoff (:func:`~mavias.storage.s3.retry_transient`) and
then fails the step, never quarantining data.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from botocore.client import BaseClient

from mavias.core.manifest import ManifestError, load_manifest, read_manifest_table
from mavias.core.manifest.quarantine import MACHINE_READ_ERRNOS
from mavias.errors import UserError
from mavias.ops.nightly import revalidation
from mavias.ops.nightly.artifacts import Dataset, NightInfo, PartitionValidation, Recorded, Sensed, Validated
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.failures import record_start
from mavias.ops.nightly.incoming import ProcessedLedger, find_manifest
from mavias.ops.nightly.layout import layout, night_id, pull, pull_evaluation_set, s3_client
from mavias.ops.nightly.pull import (
    PartitionChanged,
    changed_since_validation,
    left_in_bucket,
    pin_validated,
    read_pins,
    read_pulled,
    still_uploading,
)
from mavias.ops.validation import CheckResult, ValidationResult, validate_manifest_file
from mavias.storage.names import check_name
from mavias.storage.s3 import S3Settings, is_transient, s3_uri
from mavias.utils.atomic import write_json

log = logging.getLogger(__name__)


def sense(cfg: NightlyConfig, when: datetime, *, force_partition: str | None = None) -> Sensed:
    """New partitions (ready, neither processed nor quarantined) plus ``force_partition``, which is redone; and the
    incoming folders ignored for their unsafe names (for the report)."""
    client = s3_client(cfg, "sense")
    ledger = ProcessedLedger(client, cfg.s3)
    processed, new = ledger.processed(), set(ledger.new_partitions())
    if force_partition:
        if find_manifest(client, cfg.s3, check_name("force_partition", force_partition)) is None:
            prefix = s3_uri(cfg.s3, f"{cfg.s3.incoming_prefix}{force_partition}/")
            raise UserError(f"forced partition {force_partition!r} has no manifest under {prefix}: check the name")
        new.add(force_partition)
        processed.discard(force_partition)
    log.info("night %s: %d new partition(s) %s, %d processed before", night_id(when), len(new), sorted(new), len(processed))
    record_start(cfg, night_id(when))
    return night_info(when) | {"new": sorted(new), "processed": sorted(processed), "unsafe": ledger.unsafe_folders()}


def night_info(when: datetime) -> NightInfo:
    """The night's name and date (what the report needs when even sensing did not run)."""
    return {"night": night_id(when), "date": when.date().isoformat()}


def known_classes(cfg: NightlyConfig, evaluation_manifest: Path) -> list[str]:
    """The configured classes, else the evaluation set's: the fixed evaluation set defines the task."""
    return sorted(cfg.classes or load_manifest(evaluation_manifest, check_files=False)["label"].unique())


def _class_counts(manifest: pd.DataFrame) -> dict[str, int]:
    train = manifest[manifest["split"] == "train"] if "split" in manifest.columns else manifest.iloc[:0]
    return {str(k): int(v) for k, v in train["label"].value_counts().items()}


def _accumulated_class_counts(markers: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Training-label counts of the processed partitions, from their ledger markers (see :func:`record_processed`)."""
    total: dict[str, int] = {}
    for marker in markers.values():
        for label, n in marker.get("class_counts", {}).items():
            total[label] = total.get(label, 0) + n
    return total


def _pins(ledger: ProcessedLedger, partition: str, marker: Mapping[str, Any], folder: Path) -> dict[str, str] | None:
    """The ETags a processed partition is pinned at: its marker's, else (a marker written before pins existed) those
    the workspace pulled, recorded in the marker from now on; None when neither is known."""
    if marker.get("etags"):
        return dict(marker["etags"])
    pins = read_pulled(folder)
    if pins is not None:
        ledger.repin(partition, pins)
    return pins


def _changed_partitions(cfg: NightlyConfig, ledger: ProcessedLedger, markers: Mapping[str, Mapping[str, Any]]
                        ) -> dict[str, str]:
    """Processed partitions whose validated files the bucket no longer has and the workspace does not hold -> why.
    Each is pinned first (a fresh workspace learns its pins from the marker)."""
    changed = {}
    for partition, marker in markers.items():
        folder = layout(cfg).partition(partition)
        pins = _pins(ledger, partition, marker, folder)
        if pins is not None:
            pin_validated(folder, pins)
        names = changed_since_validation(ledger.client, cfg.s3, partition, folder)
        if names:
            changed[partition] = str(PartitionChanged(cfg.s3, partition, names))
            log.warning("%s", changed[partition])
    return changed


# This machine's faults (a failed read, too many open files, a full disk, a refused write), never the partition's
# data: pyarrow's errors on an unreadable manifest are OSErrors too, but carry no errno
MACHINE_ERRNOS = MACHINE_READ_ERRNOS | {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}


def is_machine_fault(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in MACHINE_ERRNOS


def _unreadable(err: Exception) -> ValidationResult:
    return ValidationResult([CheckResult("manifest_readable", False, details=str(err), source="mavias")])


def quarantine_partition(client: BaseClient, settings: S3Settings, partition: str, result: ValidationResult) -> str:
    """Record a failed partition under ``quarantine/<partition>/validation.json`` so it is not retried blindly.

    Nothing is moved or deleted; the ledger skips quarantined partitions until that record is removed.
    """
    return ProcessedLedger(client, settings).mark_quarantined(partition, result.to_dict())


def _validate_partition(
    cfg: NightlyConfig, client: BaseClient, night: str, partition: str, classes: list[str], counts: dict[str, int]
) -> PartitionValidation:
    folder, staging = layout(cfg).partition(partition), layout(cfg).revalidation(partition)
    staged = read_pins(folder) is not None  # validated before: the validated copy stays until this passes
    local = revalidation.stage(folder, staging) if staged else folder
    try:
        manifest = pull(cfg, client, partition, pinned=False, into=local)
        waiting = still_uploading(client, cfg.s3, partition, manifest, cfg.validation.max_upload_wait_h)
        if waiting is not None:
            log.info("partition %s: still uploading: %s", partition, waiting)
            return {"success": False, "summary": f"waiting: {waiting}", "path": "", "waiting": True}
        result = validate_manifest_file(manifest, classes, counts, cfg.validation, left_in_bucket(manifest.parent))
    except (ManifestError, OSError, ValueError) as err:  # an unreadable manifest is bad data, not a crash
        if is_transient(err) or is_machine_fault(err):  # ... but an unreachable bucket or a full disk is not: fail,
            raise  # keep the partition for a later try
        result = _unreadable(err)
    path = write_json(layout(cfg).night(night) / "validation" / f"{partition}.json", result.to_dict())
    if result.success:
        pins = pin_validated(local)
        ProcessedLedger(client, cfg.s3).repin(partition, pins)  # a processed partition validated again (forced)
        if staged:
            revalidation.adopt(folder, local)
    else:
        quarantine_partition(client, cfg.s3, partition, result)
        if staged:
            revalidation.discard(local)
    log.info("partition %s: %s", partition, result.summary())
    return {"success": result.success, "summary": result.summary(), "path": str(path)}


def pull_and_validate(cfg: NightlyConfig, sensed: Sensed) -> Validated:
    """Pull every new partition and the evaluation set; validate; quarantine the partitions that fail."""
    client = s3_client(cfg, "pull_and_validate")
    evaluation = pull_evaluation_set(cfg, client)
    classes = known_classes(cfg, evaluation)
    ledger = ProcessedLedger(client, cfg.s3)
    markers = {p: ledger.marker(p) or {} for p in sensed["processed"]}
    for partition in sensed["new"]:  # a replacement by a copy validated again, cut off last night, is finished first
        revalidation.recover(layout(cfg).partition(partition), layout(cfg).revalidation(partition))
    again = {p: marker for p in sensed["new"] if (marker := ledger.marker(p))}  # processed, forced to validate again
    changed = _changed_partitions(cfg, ledger, markers | again)
    counts = _accumulated_class_counts({p: m for p, m in markers.items() if p not in changed})
    checked = {p: _validate_partition(cfg, client, sensed["night"], p, classes, counts) for p in sensed["new"]}
    waiting = {p: v["summary"] for p, v in checked.items() if v.get("waiting")}
    validations = {p: v for p, v in checked.items() if p not in waiting}
    valid = [p for p, v in validations.items() if v["success"]]
    changed = {p: why for p, why in changed.items() if p not in valid}  # validated again tonight: as it is now
    kept = [p for p in again if p not in valid]  # its validated copy trains until a validation again passes
    return {
        "night": sensed["night"],
        "valid": valid,
        "failed": [p for p, v in validations.items() if not v["success"]],
        "waiting": waiting,
        "validations": validations,
        "changed": changed,
        "partitions": sorted({*sensed["processed"], *kept, *valid} - changed.keys()),
        "evaluation": str(evaluation),
        "classes": classes,
    }


def training_decision(validated: Validated, *, full_retrain: bool) -> tuple[bool, str]:
    """Whether tonight trains, and why (or why not) in one line for the report."""
    if validated["failed"]:
        return False, f"partition(s) {', '.join(validated['failed'])} failed validation: nothing was trained tonight"
    if not validated["partitions"]:
        return False, "no partition has been processed yet: nothing to train on"
    if not validated["valid"] and not full_retrain:
        return False, "no new partitions since the last run: nothing was trained tonight"
    if not validated["valid"]:
        return True, "full retrain requested without new partitions"
    return True, f"new partition(s): {', '.join(validated['valid'])}"


def record_processed(cfg: NightlyConfig, dataset: Dataset) -> Recorded:
    """Mark tonight's new partitions processed, with their training-label counts for the next drift check and the
    ETags they were validated at (the pins of every later pull)."""
    ledger = ProcessedLedger(s3_client(cfg, "record_processed"), cfg.s3)
    for partition in dataset["new"]:
        manifest = pull(cfg, ledger.client, partition)
        info = {"night": dataset["night"], "class_counts": _class_counts(read_manifest_table(manifest)),
                "etags": read_pins(manifest.parent) or {}}
        ledger.mark_processed(partition, info)
    return {"recorded": list(dataset["new"])}
