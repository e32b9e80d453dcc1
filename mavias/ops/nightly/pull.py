"""Pulling a partition into the workspace: resumable, pinned once validated, and streamed, so a partition's size is
bounded by its manifest, never by a listing held whole or a queue of every file.

A pulled folder keeps, beside the manifest and the images it names::

    .pulled-etags.json     the ETag of every file as the last complete pull downloaded it
    .pulled-etags.jsonl    ... and of each file as it lands, until the pull completes (a pull cut off resumes)
    .validated-etags.json  the ETag of every file as it was validated: later pulls take exactly those contents
    .too-large.json        the size of every file the last pull left in the bucket, too large for an image
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from botocore.client import BaseClient

from mavias.core.manifest.io import ManifestError, read_manifest_table
from mavias.core.manifest.quarantine import size_problem
from mavias.errors import UserError
from mavias.ops.nightly.incoming import (
    MANIFEST_NAMES,
    SUCCESS_MARKER,
    MissingManifest,
    manifest_name,
    marker_key,
    partition_prefix,
)
from mavias.storage.parallel import run_parallel
from mavias.storage.s3 import RemoteObject, S3Settings, download_file, list_objects, s3_uri
from mavias.utils.atomic import sync_all, write_json

log = logging.getLogger(__name__)

PULLED_ETAGS = ".pulled-etags.json"
PULL_JOURNAL = ".pulled-etags.jsonl"
VALIDATED_ETAGS = ".validated-etags.json"
TOO_LARGE = ".too-large.json"
JOURNAL_BATCH = 256


class PartitionChanged(UserError):
    """A validated partition whose files changed in the bucket since, with no validated copy in the workspace."""

    def __init__(self, settings: S3Settings, partition: str, names: list[str]):
        self.partition, self.names = partition, names
        super().__init__(
            f"partition {partition}: {len(names)} file(s) changed or vanished in the bucket after it was validated "
            f"(e.g. {names[0]}); it is left out of training. Restore them, or upload the new contents as a new "
            f"partition; to validate the changed one again, delete {s3_uri(settings, marker_key(settings, partition))}")


def referenced_files(manifest_path: Path) -> set[str]:
    """Normalised relative paths of the files a pulled manifest points to; blank uris are left to validation."""
    df = read_manifest_table(manifest_path)
    if "uri" not in df.columns:
        return set()
    uris = [str(u) for u in df["uri"].dropna() if str(u).strip()]
    bad = [u for u in uris if u.startswith("s3://") or PurePosixPath(u).is_absolute() or ".." in PurePosixPath(u).parts]
    if bad:
        raise ManifestError(f"{manifest_path}: uris must be relative to the partition, got e.g. {bad[:3]}")
    # the pull keeps its bookkeeping (pins, journal) and the manifest beside the images, under names like these
    own = [u for u in uris if any(part.startswith(".") for part in PurePosixPath(u).parts)
           or PurePosixPath(u).name in MANIFEST_NAMES]
    if own:
        raise ManifestError(f"{manifest_path}: uris must name image files, got e.g. {own[:3]} (a hidden file or the "
                            "manifest)", hint="name the images without a leading '.' in any folder or file name")
    return {PurePosixPath(u).as_posix() for u in uris}


def listing(client: BaseClient, settings: S3Settings, partition: str, start: str = "") -> Iterator[
        tuple[str, RemoteObject]]:
    """(name within the partition, object) of the partition's files whose names begin with ``start``, page by page."""
    prefix = partition_prefix(settings, partition)
    for obj in list_objects(client, settings, prefix + start):
        yield obj.key[len(prefix) :], obj


def _read_etags(path: Path) -> dict[str, str] | None:
    return json.loads(path.read_text()) if path.exists() else None


def read_pins(local_dir: str | Path) -> dict[str, str] | None:
    """The ETags a partition's files had when it was validated, or None when it was never pinned."""
    return _read_etags(Path(local_dir) / VALIDATED_ETAGS)


def read_pulled(local_dir: str | Path) -> dict[str, str] | None:
    """The ETags of the last complete pull of a partition, or None when none completed."""
    return _read_etags(Path(local_dir) / PULLED_ETAGS)


def left_in_bucket(local_dir: str | Path) -> dict[str, str]:
    """Why each file the last pull of a partition did not download was left in the bucket (name -> reason)."""
    sizes = _read_etags(Path(local_dir) / TOO_LARGE) or {}
    return {name: size_problem(size) or "" for name, size in sizes.items()}


def pin_validated(local_dir: str | Path, pins: Mapping[str, str] | None = None) -> dict[str, str]:
    """Pin a partition's files at the ETags just pulled and validated (or at ``pins``, e.g. from its ledger marker)."""
    local_dir = Path(local_dir)
    pins = dict(pins if pins is not None else json.loads((local_dir / PULLED_ETAGS).read_text()))
    write_json(local_dir / VALIDATED_ETAGS, pins)
    return pins


class _PullJournal:
    """What a pull has downloaded so far: the last complete pull's ETags plus a line per file landed since, so that
    a pull cut off part-way (a deadline, a crash) resumes with the files it still lacks.

    Files land without an fsync each; every ``JOURNAL_BATCH`` of them one sync makes them durable and only then are
    they journaled (also when the pull is cut off by an error), so a journaled file is always on disk."""

    def __init__(self, folder: Path):
        self.done, self.journal = folder / PULLED_ETAGS, folder / PULL_JOURNAL
        self._lock = threading.Lock()
        self._landed: list[str] = []  # journal lines of files not yet made durable

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
        with self._lock:
            self._landed.append(json.dumps({"name": name, "etag": etag}) + "\n")
            if len(self._landed) >= JOURNAL_BATCH:
                self._commit()

    def commit(self) -> None:
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        if self._landed:
            sync_all()
            with self.journal.open("a") as journal:
                journal.writelines(self._landed)
            self._landed.clear()

    def finish(self, etags: Mapping[str, str]) -> None:
        self.commit()
        write_json(self.done, dict(etags))
        self.journal.unlink(missing_ok=True)


class _Pull:
    """One pull of a partition: each referenced file is held at its target ETag (the pinned one once validated,
    else the bucket's), decided as the listing streams by and downloaded on a bounded pool meanwhile."""

    def __init__(self, client: BaseClient, settings: S3Settings, partition: str, local_dir: Path,
                 pins: Mapping[str, str] | None):
        self.client, self.settings, self.partition, self.local = client, settings, partition, local_dir
        self.pins = pins
        self.journal = _PullJournal(local_dir)
        self.pulled = self.journal.load()
        self.held: dict[str, str] = {}  # name -> the ETag it is held at after this pull
        self.changed: set[str] = set()
        self.missing: list[str] = []
        self.too_large: dict[str, int] = {}  # name -> size of the files left in the bucket unread
        self.downloads = 0

    def _kept_as_validated(self, name: str) -> bool:
        return self.pins is not None and self.pulled.get(name) == self.pins[name] and (self.local / name).is_file()

    def _target(self, name: str, obj: RemoteObject | None) -> str | None:
        """The ETag to hold ``name`` at, or None when it is not part of the partition (noting a pinned file that no
        pull can bring back as validated)."""
        if self.pins is None:
            return obj.etag if obj is not None else None
        if name not in self.pins:
            return None
        if (obj is None or obj.etag != self.pins[name]) and not self._kept_as_validated(name):
            self.changed.add(name)
        return self.pins[name]

    def _stale(self, name: str, obj: RemoteObject | None, etag: str) -> bool:
        # ETags, not md5s, identify contents: SSE-KMS and multipart ETags are not md5 digests.
        path = self.local / name
        if self.pulled.get(name) != etag or not path.is_file():
            return True
        return obj is not None and obj.etag == etag and obj.size != path.stat().st_size

    def _plan(self, name: str, obj: RemoteObject | None) -> Iterator[tuple[str, str]]:
        """(name, ETag) to download, if ``name`` needs it."""
        etag = self._target(name, obj)
        if etag is None:
            self.missing.append(name)
            (self.local / name).unlink(missing_ok=True)  # an earlier copy must not pass for the file (a takedown)
            return
        self.held[name] = etag
        if name not in self.changed and self._stale(name, obj, etag):
            self.downloads += 1
            yield name, etag

    def _left_in_bucket(self, name: str, obj: RemoteObject | None) -> bool:
        """Whether an image file is too large to be one: then it is not downloaded, and validation quarantines it
        with that reason (a pinned partition's files were validated, so none of them is)."""
        if self.pins is not None or obj is None or not size_problem(obj.size):
            return False
        self.too_large[name] = obj.size
        (self.local / name).unlink(missing_ok=True)
        return True

    def _fetch(self, job: tuple[str, str]) -> None:
        name, etag = job
        download_file(self.client, self.settings, partition_prefix(self.settings, self.partition) + name,
                      self.local / name, etag=etag, sync=False)
        self.journal.record(name, etag)

    def _listed(self, wanted: set[str]) -> Iterator[tuple[str, RemoteObject | None]]:
        """(name, object) of each name of ``wanted`` (consumed) as the listing brings it, then (name, None) for those
        the bucket lacks."""
        for name, obj in listing(self.client, self.settings, self.partition):
            if name in wanted:
                wanted.discard(name)
                yield name, obj
        for name in sorted(wanted):
            yield name, None

    def changes_in_bucket(self) -> list[str]:
        """The pinned files no pull can bring back as validated."""
        for name, obj in self._listed(set(self.pins or {})):
            self._target(name, obj)
        return sorted(self.changed)

    def _raise_if_changed(self) -> None:
        if self.changed:
            raise PartitionChanged(self.settings, self.partition, sorted(self.changed))

    def manifest(self) -> Path:
        manifests = dict(listing(self.client, self.settings, self.partition, "manifest."))
        name = manifest_name(set(self.pins if self.pins is not None else manifests))
        if name is None:
            raise MissingManifest(f"{s3_uri(self.settings, partition_prefix(self.settings, self.partition))}: no "
                                  f"manifest ({' or '.join(MANIFEST_NAMES)})")
        jobs = list(self._plan(name, manifests.get(name)))
        self._raise_if_changed()
        self.local.mkdir(parents=True, exist_ok=True)
        for job in jobs:
            self._fetch(job)
        return self.local / name

    def files(self, wanted: set[str]) -> None:
        """Hold every file of ``wanted`` (consumed) at its target ETag, then mark the pull complete."""
        new = sum(1 for name in wanted if name not in self.pulled)  # the progress bar's estimate of the downloads

        jobs = (job for name, obj in self._listed(wanted) if not self._left_in_bucket(name, obj)
                for job in self._plan(name, obj))
        try:
            run_parallel(self._fetch, jobs, self.settings.max_workers, desc=f"pull {self.partition}", total=new)
        finally:
            self.journal.commit()  # what landed is kept for the next pull, also when this one is cut off
        if self.missing:
            log.warning("partition %s: %d referenced file(s) missing, e.g. %s", self.partition, len(self.missing),
                        sorted(self.missing)[:3])
        self._raise_if_changed()
        self.journal.finish(self.held)
        (self.local / TOO_LARGE).unlink(missing_ok=True)
        if self.too_large:
            write_json(self.local / TOO_LARGE, self.too_large)
            log.warning("partition %s: %d file(s) too large for an image left in the bucket, e.g. %s", self.partition,
                        len(self.too_large), sorted(self.too_large)[0])
        log.info("partition %s: %d file(s) downloaded, %d up to date", self.partition, self.downloads,
                 len(self.held) - self.downloads)


def pull_partition(client: BaseClient, settings: S3Settings, partition: str, local_dir: str | Path, *,
                   pinned: bool = True) -> Path:
    """Download a partition's manifest and the images it references to ``local_dir``; return the manifest path.

    Idempotent and resumable: a file pulled before (by a complete pull or one cut off part-way) whose size and
    ETag are unchanged is not transferred again. Referenced files missing from the bucket are logged and left for
    validation to quarantine. Once validated (:func:`pin_validated`), a partition is pulled at its pinned ETags
    only: a file changed since is kept as validated when the workspace holds it, else :class:`PartitionChanged`
    (raised once the rest is pulled); ``pinned=False`` pulls what the bucket has now (for validating it again).
    """
    local_dir = Path(local_dir)
    pull = _Pull(client, settings, partition, local_dir, read_pins(local_dir) if pinned else None)
    manifest = pull.manifest()
    pull.files(referenced_files(manifest))
    return manifest


def changed_since_validation(client: BaseClient, settings: S3Settings, partition: str,
                             local_dir: str | Path) -> list[str]:
    """Files of a pinned partition that no pull can bring back as validated (empty when it is fine or unpinned)."""
    pins = read_pins(local_dir)
    return [] if pins is None else _Pull(client, settings, partition, Path(local_dir), pins).changes_in_bucket()


def still_uploading(client: BaseClient, settings: S3Settings, partition: str, manifest_path: Path,
                    max_wait_h: float) -> str | None:
    """Why a pulled partition is not complete yet, or None when it is (see docs/operations.md, the producer contract):
    files its manifest names arrived in the bucket after the pull took its listing (the next try pulls them), or its
    manifest names files the bucket lacks, no ``_SUCCESS`` marker declares it finished, and its manifest is younger
    than ``max_wait_h`` (after that, missing files are the producer's loss and validation holds them back)."""
    missing = referenced_files(manifest_path)
    left = left_in_bucket(manifest_path.parent)
    not_pulled = {name for name in missing if name not in left and not (manifest_path.parent / name).is_file()}
    finished, modified, arrived = False, None, []
    for name, obj in listing(client, settings, partition):
        missing.discard(name)
        finished |= name == SUCCESS_MARKER
        modified = obj.modified if name == manifest_path.name else modified
        if name in not_pulled:
            arrived.append(name)
    if arrived:
        return (f"{len(arrived)} file(s) its manifest names arrived after they were pulled (e.g. {sorted(arrived)[0]})"
                "; taken on the next try")
    if not missing or finished:
        return None
    age_h = (datetime.now(UTC) - modified).total_seconds() / 3600 if modified else float("inf")
    if age_h >= max_wait_h:
        return None
    return (f"{len(missing)} file(s) its manifest names are not in the bucket yet (e.g. {sorted(missing)[0]}); taken "
            f"once they are, or a {SUCCESS_MARKER} marker is written, or {max_wait_h:g} h after its manifest")
