"""Incoming partitions in the bucket: which are ready, which are done (the processed ledger), pulling one.

Layout (prefixes from :class:`~mavias.storage.s3.S3Settings`)::

    incoming/<partition>/manifest.{parquet,csv}   a partition is ready once its manifest exists, so producers
    incoming/<partition>/<images...>              upload the images first and the manifest last
    state/processed/<partition>.json              ledger: one marker per processed partition, with the ETag of
                                                  every file as validated (a later change is refused)
    quarantine/<partition>/validation.json        partitions that failed validation (delete it to retry)
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from botocore.client import BaseClient

from mavias.core.manifest.io import ManifestError, read_manifest_table
from mavias.errors import UserError
from mavias.storage.s3 import (
    NAME_PATTERN,
    RemoteObject,
    S3Settings,
    check_name,
    create_json,
    download_file,
    get_json,
    list_folders,
    list_objects,
    put_json,
    run_parallel,
    s3_uri,
)
from mavias.utils.atomic import write_json

log = logging.getLogger(__name__)

MANIFEST_NAMES = ("manifest.parquet", "manifest.csv")  # in order of preference
PULLED_ETAGS = ".pulled-etags.json"  # in a pulled folder: the ETag of every file as it was downloaded
PULL_JOURNAL = ".pulled-etags.jsonl"  # ... and of each file as it lands, until the pull completes
VALIDATED_ETAGS = ".validated-etags.json"  # ... and of every file as it was validated: the pins of later pulls
SUCCESS_MARKER = "_SUCCESS"  # a producer that uploads in any order writes it last: the partition is complete


class MissingManifest(ManifestError):
    """A partition (or the evaluation set) with no manifest in the bucket."""


class PartitionChanged(UserError):
    """A validated partition whose files changed in the bucket since, with no validated copy in the workspace."""

    def __init__(self, settings: S3Settings, partition: str, names: list[str]):
        self.partition, self.names = partition, names
        super().__init__(
            f"partition {partition}: {len(names)} file(s) changed or vanished in the bucket after it was validated "
            f"(e.g. {names[0]}); it is left out of training. Restore them, or upload the new contents as a new "
            f"partition; to validate the changed one again, delete {s3_uri(settings, marker_key(settings, partition))}")


def processed_prefix(settings: S3Settings) -> str:
    """The processed ledger's folder: one marker per processed partition."""
    return f"{settings.state_prefix}processed/"


def marker_key(settings: S3Settings, partition: str) -> str:
    """The processed ledger's marker of ``partition``."""
    return f"{processed_prefix(settings)}{check_name('partition', partition)}.json"


def partition_prefix(settings: S3Settings, partition: str) -> str:
    return f"{settings.incoming_prefix}{check_name('partition', partition)}/"


def _manifest_name(names: set[str]) -> str | None:
    return next((name for name in MANIFEST_NAMES if name in names), None)


def find_manifest(client: BaseClient, settings: S3Settings, partition: str) -> str | None:
    """Key of the partition's manifest, or ``None`` while it has none (not ready yet)."""
    prefix = partition_prefix(settings, partition)
    names = {obj.key[len(prefix) :] for obj in list_objects(client, settings, prefix + "manifest.")}
    name = _manifest_name(names)
    return prefix + name if name else None


def unsafe_names(folders: Collection[str]) -> list[str]:
    """The folder names that cannot become a path (traversal, separators, odd characters), sorted."""
    return sorted(p for p in folders if not NAME_PATTERN.match(p) or ".." in p)


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
        keys = (obj.key for obj in list_objects(self.client, self.settings, self.processed_prefix))
        return {key[len(self.processed_prefix) :].removesuffix(".json") for key in keys if key.endswith(".json")}

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


def _referenced_files(manifest_path: Path) -> set[str]:
    """Normalised relative paths of the files a pulled manifest points to; blank uris are left to validation."""
    df = read_manifest_table(manifest_path)
    if "uri" not in df.columns:
        return set()
    uris = [str(u) for u in df["uri"].dropna() if str(u).strip()]
    bad = [u for u in uris if u.startswith("s3://") or PurePosixPath(u).is_absolute() or ".." in PurePosixPath(u).parts]
    if bad:
        raise ManifestError(f"{manifest_path}: uris must be relative to the partition, got e.g. {bad[:3]}")
    return {PurePosixPath(u).as_posix() for u in uris}


def _read_etags(path: Path) -> dict[str, str] | None:
    return json.loads(path.read_text()) if path.exists() else None


class _PullJournal:
    """What a pull has downloaded so far: the last complete pull's ETags plus a line per file landed since, so that
    a pull cut off part-way (a deadline, a crash) resumes with the files it still lacks."""

    def __init__(self, folder: Path):
        self.done, self.journal = folder / PULLED_ETAGS, folder / PULL_JOURNAL
        self._lock = threading.Lock()

    def load(self) -> dict[str, str]:
        pulled = _read_etags(self.done) or {}
        lines = self.journal.read_text().splitlines() if self.journal.exists() else []
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line being written when the pull was cut off
            pulled[entry["name"]] = entry["etag"]
        return pulled

    def record(self, name: str, etag: str) -> None:
        with self._lock, self.journal.open("a") as journal:
            journal.write(json.dumps({"name": name, "etag": etag}) + "\n")

    def finish(self, etags: Mapping[str, str]) -> None:
        write_json(self.done, dict(etags))
        self.journal.unlink(missing_ok=True)


def still_uploading(client: BaseClient, settings: S3Settings, partition: str, manifest_path: Path,
                    max_wait_h: float) -> str | None:
    """Why a pulled partition is not complete yet, or None when it is (see docs/operations.md, the producer contract):
    its manifest names files the bucket lacks, no ``_SUCCESS`` marker declares it finished, and its manifest is
    younger than ``max_wait_h`` (after that, missing files are the producer's loss and validation holds them back)."""
    remote = _remote_files(client, settings, partition)
    missing = _referenced_files(manifest_path) - remote.keys()
    if not missing or SUCCESS_MARKER in remote:
        return None
    modified = remote[manifest_path.name].modified if manifest_path.name in remote else None
    age_h = (datetime.now(UTC) - modified).total_seconds() / 3600 if modified else float("inf")
    if age_h >= max_wait_h:
        return None
    return (f"{len(missing)} file(s) its manifest names are not in the bucket yet (e.g. {sorted(missing)[0]}); taken "
            f"once they are, or a {SUCCESS_MARKER} marker is written, or {max_wait_h:g} h after its manifest")


def _remote_files(client: BaseClient, settings: S3Settings, partition: str) -> dict[str, RemoteObject]:
    prefix = partition_prefix(settings, partition)
    return {obj.key[len(prefix) :]: obj for obj in list_objects(client, settings, prefix)}


def _unpinned_changes(remote: Mapping[str, RemoteObject], pins: Mapping[str, str], pulled: Mapping[str, str],
                      local_dir: Path) -> list[str]:
    """Pinned files whose bucket copy changed or vanished and whose validated copy the workspace does not hold."""
    def held(name: str) -> bool:
        return pulled.get(name) == pins[name] and (local_dir / name).is_file()

    return sorted(name for name, etag in pins.items()
                  if (name not in remote or remote[name].etag != etag) and not held(name))


def read_pins(local_dir: str | Path) -> dict[str, str] | None:
    """The ETags a partition's files had when it was validated, or None when it was never pinned."""
    return _read_etags(Path(local_dir) / VALIDATED_ETAGS)


def read_pulled(local_dir: str | Path) -> dict[str, str] | None:
    """The ETags of the last complete pull of a partition, or None when none completed."""
    return _read_etags(Path(local_dir) / PULLED_ETAGS)


def pin_validated(local_dir: str | Path, pins: Mapping[str, str] | None = None) -> dict[str, str]:
    """Pin a partition's files at the ETags just pulled and validated (or at ``pins``, e.g. from its ledger marker)."""
    local_dir = Path(local_dir)
    pins = dict(pins if pins is not None else json.loads((local_dir / PULLED_ETAGS).read_text()))
    write_json(local_dir / VALIDATED_ETAGS, pins)
    return pins


def changed_since_validation(client: BaseClient, settings: S3Settings, partition: str,
                             local_dir: str | Path) -> list[str]:
    """Files of a pinned partition that no pull can bring back as validated (empty when it is fine or unpinned)."""
    pins = read_pins(local_dir)
    if pins is None:
        return []
    return _unpinned_changes(_remote_files(client, settings, partition), pins, _PullJournal(Path(local_dir)).load(),
                             Path(local_dir))


def pull_partition(client: BaseClient, settings: S3Settings, partition: str, local_dir: str | Path, *,
                   pinned: bool = True) -> Path:
    """Download a partition's manifest and the images it references to ``local_dir``; return the manifest path.

    Idempotent and resumable: a file pulled before (by a complete pull or one cut off part-way) whose size and
    ETag are unchanged is not transferred again. Referenced files missing from the bucket are logged and left for
    validation to quarantine. Once validated (:func:`pin_validated`), a partition is pulled at its pinned ETags
    only: a file changed since is kept as validated when the workspace holds it, else :class:`PartitionChanged`;
    ``pinned=False`` pulls what the bucket has now (for validating it again).
    """
    local_dir = Path(local_dir)
    remote = _remote_files(client, settings, partition)
    pins = read_pins(local_dir) if pinned else None
    manifest_name = _manifest_name(set(pins if pins is not None else remote))
    if manifest_name is None:
        raise MissingManifest(f"{s3_uri(settings, partition_prefix(settings, partition))}: no manifest "
                              f"({' or '.join(MANIFEST_NAMES)})")
    local_dir.mkdir(parents=True, exist_ok=True)
    journal = _PullJournal(local_dir)
    pulled = journal.load()
    if pins is not None:
        changed = _unpinned_changes(remote, pins, pulled, local_dir)
        if changed:
            raise PartitionChanged(settings, partition, changed)
    wanted_etag = dict(pins) if pins is not None else {name: obj.etag for name, obj in remote.items()}

    def stale(name: str) -> bool:
        # ETags, not md5s, identify contents: SSE-KMS and multipart ETags are not md5 digests.
        path, obj = local_dir / name, remote.get(name)
        if pulled.get(name) != wanted_etag[name] or not path.is_file():
            return True
        return obj is not None and obj.etag == wanted_etag[name] and obj.size != path.stat().st_size

    def fetch(name: str) -> None:
        download_file(client, settings, remote[name].key, local_dir / name, etag=wanted_etag[name])
        journal.record(name, wanted_etag[name])

    if stale(manifest_name):
        fetch(manifest_name)
    wanted = _referenced_files(local_dir / manifest_name)
    missing = sorted(wanted - wanted_etag.keys())
    if missing:
        log.warning("partition %s: %d referenced file(s) missing, e.g. %s", partition, len(missing), missing[:3])
        for name in missing:  # a copy an earlier pull left must not pass for the file (a producer's takedown)
            (local_dir / name).unlink(missing_ok=True)
    present = sorted(wanted & wanted_etag.keys())
    todo = [name for name in present if stale(name)]
    run_parallel(fetch, todo, settings.max_workers, desc=f"pull {partition}")
    journal.finish({name: wanted_etag[name] for name in [manifest_name, *present]})
    log.info("partition %s: %d file(s) downloaded, %d up to date", partition, len(todo), len(present) - len(todo))
    return local_dir / manifest_name
