"""Incoming partitions in the bucket: which are ready and which are done (the processed ledger).

Layout (prefixes from :class:`~mavias.storage.s3.S3Settings`)::

    incoming/<partition>/manifest.{parquet,csv}   a partition is ready once its manifest exists, so producers
    incoming/<partition>/<images...>              upload the images first and the manifest last (pulled by
                                                  :mod:`mavias.ops.nightly.pull`)
    state/processed/<partition>.json              ledger: one marker per processed partition, with the ETag of
                                                  every file as validated (a later change is refused)
    quarantine/<partition>/validation.json        partitions that failed validation (delete it to retry)
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.client import BaseClient

from mavias.core.manifest.io import ManifestError
from mavias.storage.names import check_name, is_safe_name
from mavias.storage.s3 import (
    S3Settings,
    create_json,
    get_json,
    list_folders,
    list_objects,
    put_json,
    s3_uri,
)

log = logging.getLogger(__name__)

MANIFEST_NAMES = ("manifest.parquet", "manifest.csv")  # in order of preference
SUCCESS_MARKER = "_SUCCESS"  # a producer that uploads in any order writes it last: the partition is complete


class MissingManifest(ManifestError):
    """A partition (or the evaluation set) with no manifest in the bucket."""


def processed_prefix(settings: S3Settings) -> str:
    """The processed ledger's folder: one marker per processed partition."""
    return f"{settings.state_prefix}processed/"


def marker_key(settings: S3Settings, partition: str) -> str:
    """The processed ledger's marker of ``partition``."""
    return f"{processed_prefix(settings)}{check_name('partition', partition)}.json"


def partition_prefix(settings: S3Settings, partition: str) -> str:
    return f"{settings.incoming_prefix}{check_name('partition', partition)}/"


def manifest_name(names: set[str]) -> str | None:
    return next((name for name in MANIFEST_NAMES if name in names), None)


def find_manifest(client: BaseClient, settings: S3Settings, partition: str) -> str | None:
    """Key of the partition's manifest, or ``None`` while it has none (not ready yet)."""
    prefix = partition_prefix(settings, partition)
    names = {obj.key[len(prefix) :] for obj in list_objects(client, settings, prefix + "manifest.")}
    name = manifest_name(names)
    return prefix + name if name else None


def unsafe_names(folders: Collection[str]) -> list[str]:
    """The folder names that cannot become a path (traversal, separators, odd characters), sorted."""
    return sorted(p for p in folders if not is_safe_name(p))


def list_partitions(client: BaseClient, settings: S3Settings, exclude: Collection[str] = ()) -> list[str]:
    """Sorted names of the folders under ``incoming/`` that hold a manifest, except those in ``exclude``."""
    folders = list_folders(client, settings, settings.incoming_prefix)
    unsafe = unsafe_names(folders)
    if unsafe:
        log.warning("ignoring incoming folder(s) with unsafe names %s: rename them to letters, digits, '.', '_', '-'",
                    unsafe)
    return [p for p in folders if p not in exclude and p not in unsafe and find_manifest(client, settings, p)]


class ProcessedLedger:
    """Which partitions are done, kept in the bucket as one marker object per partition.

    Markers are created with If-None-Match, so a partition is recorded exactly once even if two runs race;
    there is no shared file to read-modify-write.
    """

    def __init__(self, client: BaseClient, settings: S3Settings):
        self.client = client
        self.settings = settings
        self.processed_prefix = processed_prefix(settings)

    def processed(self) -> set[str]:
        """The partitions with a marker; other objects there (a backup folder, a stray file) are left out, named in
        the log."""
        keys = [obj.key[len(self.processed_prefix):] for obj in list_objects(self.client, self.settings,
                                                                             self.processed_prefix)]
        marked = {key.removesuffix(".json") for key in keys if key.endswith(".json")}
        names = {name for name in marked if is_safe_name(name)}
        if strays := sorted(key for key in keys if key.removesuffix(".json") not in names):
            log.warning("ignoring object(s) in %s that mark no partition: %s", self.processed_prefix, strays[:5])
        return names

    def quarantined(self) -> set[str]:
        return set(list_folders(self.client, self.settings, self.settings.quarantine_prefix))

    def unsafe_folders(self) -> list[str]:
        """Folders under ``incoming/`` ignored for their names (each as Python's ``ascii()`` writes it)."""
        return [ascii(name) for name in unsafe_names(list_folders(self.client, self.settings, self.settings.incoming_prefix))]

    def new_partitions(self) -> list[str]:
        """Ready partitions that were neither processed nor quarantined, sorted."""
        return list_partitions(self.client, self.settings, exclude=self.processed() | self.quarantined())

    def marker(self, partition: str) -> dict[str, Any] | None:
        found = get_json(self.client, self.settings, marker_key(self.settings, partition))
        return found[0] if found else None

    def mark_processed(self, partition: str, info: Mapping[str, Any] | None = None) -> bool:
        """Record ``partition`` as processed; False when it already was (the first record is kept, but for the pins
        of a partition validated again)."""
        payload = {"partition": partition, "processed_at": datetime.now(UTC).isoformat(), **(info or {})}
        created = create_json(self.client, self.settings, marker_key(self.settings, partition), payload)
        if not created and "etags" in payload:
            self.repin(partition, payload["etags"])
        log.info("partition %s %s", partition, "marked processed" if created else "was already processed")
        return created

    def repin(self, partition: str, pins: Mapping[str, str]) -> None:
        """Set the ETags a processed partition's marker pins (validated again, or recorded before pins existed)."""
        key = marker_key(self.settings, partition)
        found = get_json(self.client, self.settings, key)
        if found is not None and found[0].get("etags") != dict(pins):
            put_json(self.client, self.settings, key, found[0] | {"etags": dict(pins)}, if_match=found[1])

    def mark_quarantined(self, partition: str, report: Mapping[str, Any]) -> str:
        """Store ``report`` (e.g. a validation result) as ``quarantine/<partition>/validation.json``; return its URI."""
        key = f"{self.settings.quarantine_prefix}{check_name('partition', partition)}/validation.json"
        put_json(self.client, self.settings, key, {"partition": partition, **report})
        log.warning("partition %s quarantined: %s", partition, s3_uri(self.settings, key))
        return s3_uri(self.settings, key)
