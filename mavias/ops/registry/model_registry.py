"""Model registry in S3: immutable versions, an atomically updated production pointer, full history, rollback.

Layout under ``models/<name>/``::

    <version>/...              the version's files, each created with If-None-Match (never overwritten)
    <version>/_version.json    written last: a version exists (and can be promoted) once this marker does
    production.json            the pointer: every promotion and rollback so far, the last one is production

The pointer is validated whenever it is read (:class:`PointerDocument`): a truncated, empty or hand-edited pointer
raises :class:`CorruptPointer`, whose message says what is wrong and how to recover (:meth:`ModelRegistry.repair`,
``mavias registry repair``), and is never used as a path. An empty history is "no production yet" only while no
version is published: once versions exist, an empty history means the promotion history was lost (corrupt).

The pointer is a single object, so production and its history change together in one conditional PUT
(If-Match on the ETag the caller read, If-None-Match when there was no pointer yet). S3 applies a
conditional write atomically: of several writers holding the same ETag exactly one succeeds, the others
get 412 PreconditionFailed (or 409 ConditionalRequestConflict) and lose. Nothing is ever deleted.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from botocore.client import BaseClient
from botocore.exceptions import ClientError
from pydantic import ValidationError

from mavias.errors import UserError
from mavias.ops.registry.model_card import CARD_NAME
from mavias.ops.registry.pointer import (
    PointerDocument,
    PointerRecord,
    PointerState,
    production_stack,
    production_stack_or_none,
)
from mavias.storage.names import UnsafeName, check_name
from mavias.storage.s3 import (
    S3Settings,
    create_json,
    get_json,
    holds_file,
    is_condition_failure,
    list_objects,
    local_files,
    put_json,
    s3_uri,
    upload_dir,
)

log = logging.getLogger(__name__)

VERSION_MARKER = "_version.json"
GATES_NAME = "gates.json"  # a version's gate report, as the nightly packages it
UPLOAD_ROUNDS = 3  # looks at a version's files before giving it up to another publisher
POINTER_NAME = "production.json"


class RegistryError(RuntimeError):
    pass


class VersionExists(RegistryError):
    pass


class VersionNotFound(RegistryError, UserError):
    pass


class NothingToChange(UserError, RegistryError):
    """A promotion of the production version, or a rollback with no earlier version."""


class PromotionConflict(RegistryError):
    """The pointer changed between reading and writing it: somebody else promoted or rolled back first."""


class CorruptPointer(RegistryError, UserError):
    """The production pointer cannot be read as a valid history; the message says how to repair it."""


class InvalidName(RegistryError, UserError):
    """A model or version name the registry cannot store (it names S3 keys): the user's to fix."""


def _check_name(kind: str, value: str) -> str:
    try:
        return check_name(kind, value)
    except UnsafeName as err:
        raise InvalidName(str(err)) from None


class ModelRegistry:
    def __init__(self, client: BaseClient, settings: S3Settings, name: str, *, actor: str | None = None):
        self.client = client
        self.settings = settings
        self.name = _check_name("model name", name)
        self.actor = actor or f"{socket.gethostname()}:{os.getpid()}"
        self.prefix = f"{settings.models_prefix}{name}/"
        self.pointer_key = self.prefix + POINTER_NAME

    def version_uri(self, version: str) -> str:
        return s3_uri(self.settings, f"{self.prefix}{version}/")

    def versions(self) -> list[str]:
        """Published versions, sorted by name."""
        keys = (obj.key[len(self.prefix) :] for obj in list_objects(self.client, self.settings, self.prefix))
        markers = (key for key in keys if key.count("/") == 1 and key.endswith(f"/{VERSION_MARKER}"))
        return sorted(key.removesuffix(f"/{VERSION_MARKER}") for key in markers)

    def require_published(self, version: str) -> None:
        """Raise :class:`VersionNotFound` unless ``version`` was published (its marker written last)."""
        marker = f"{self.prefix}{_check_name('version', version)}/{VERSION_MARKER}"
        if get_json(self.client, self.settings, marker) is None:
            raise VersionNotFound(f"{self.version_uri(version)} is not a published version "
                                  f"(see `mavias registry list --name {self.name}`)")

    def publish_version(self, local_dir: str | Path, version: str) -> str:
        """Upload every file of ``local_dir`` as ``version``; raise :class:`VersionExists` rather than overwrite.

        A publish cut off part-way (files there, no marker) is resumed: files already there with the same content
        (the sha256 stored with them; for older uploads the ETag, the MD5 of a single PUT on unencrypted buckets) are
        kept, the rest uploaded, then the marker written."""
        version_prefix = f"{self.prefix}{_check_name('version', version)}/"
        keys = self._upload_files(local_dir, version, version_prefix)
        files = [key[len(version_prefix) :] for key in keys]
        marker = {"version": version, "files": files, "at": _now(), "by": self.actor}
        created = create_json(self.client, self.settings, version_prefix + VERSION_MARKER, marker)
        if not created:
            raise VersionExists(f"{self.version_uri(version)} was published concurrently")
        log.info("model %s: published %s", self.name, self.version_uri(version))
        return self.version_uri(version)

    def _upload_files(self, local_dir: str | Path, version: str, version_prefix: str) -> list[str]:
        """Every file of the package uploaded under ``version_prefix`` (never over another's); their keys. A file
        found there on upload (a retried PUT whose first reply was lost, or a second attempt of the same task) is
        checked and kept when it holds the same bytes, so the publish goes on."""
        rounds = 0
        while True:
            there = {obj.key[len(version_prefix):]: obj.etag.strip('"')
                     for obj in list_objects(self.client, self.settings, version_prefix)}
            if VERSION_MARKER in there:
                raise VersionExists(f"{self.version_uri(version)} already exists; versions are immutable")
            self._check_resumable(local_dir, version, there)
            try:
                keys = upload_dir(self.client, self.settings, local_dir, version_prefix, if_none_match=True,
                                  skip=there)
            except ClientError as err:
                rounds += 1
                if not is_condition_failure(err):
                    raise
                if rounds == UPLOAD_ROUNDS:
                    raise VersionExists(f"{self.version_uri(version)} is being published concurrently") from err
                continue  # look again at what is there
            if not keys:
                raise RegistryError(f"{local_dir}: no files to publish")
            return keys

    def _check_resumable(self, local_dir: str | Path, version: str, there: dict[str, str]) -> None:
        """Files a cut-off publish left must be this package's own, or the version is somebody else's."""
        if not there:
            return
        local, prefix = local_files(local_dir), f"{self.prefix}{version}/"
        foreign = sorted(name for name, etag in there.items() if name not in local
                         or not holds_file(self.client, self.settings, prefix + name, etag, local[name]))
        if foreign:
            raise VersionExists(f"{self.version_uri(version)} holds files of an unfinished publish that differ from "
                                f"this package ({', '.join(foreign[:3])}); publish under a new version name, or delete "
                                "that folder if nothing uses it")
        log.info("model %s: resuming the publish of %s (%d of %d files already there)", self.name, version,
                 len(there), len(local))

    def pointer_state(self) -> PointerState:
        """The pointer as stored, validated; never raises on bad content (see ``problem``)."""
        response = self._get_pointer_object()
        if response is None:
            return PointerState([], None)
        body, etag = response
        try:
            document = PointerDocument.model_validate_json(body)
        except ValidationError as err:
            problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in err.errors()[:3])
            return PointerState([], etag, problem)
        if document.name != self.name:
            return PointerState([], etag, f"it names model {document.name!r}, not {self.name!r}")
        if not document.history and (published := self.versions()):
            return PointerState([], etag, f"its history is empty while {len(published)} version(s) are published "
                                          f"(newest {published[-1]}): the promotion history was lost")
        return PointerState(document.history, etag)

    def _get_pointer_object(self) -> tuple[bytes, str] | None:
        try:
            response = self.client.get_object(Bucket=self.settings.bucket, Key=self.pointer_key)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return response["Body"].read(), response["ETag"]

    def _read_pointer(self) -> tuple[list[PointerRecord], str | None]:
        state = self.pointer_state()
        if state.problem is not None:
            raise CorruptPointer(
                f"the production pointer {s3_uri(self.settings, self.pointer_key)} is corrupt ({state.problem}); "
                f"see `mavias registry show --name {self.name}` and rebuild it with "
                f"`mavias registry repair --name {self.name}`"
            )
        return state.history, state.etag

    def history(self) -> list[PointerRecord]:
        """Every promotion and rollback, oldest first (:class:`CorruptPointer` when the pointer is unusable)."""
        return self._read_pointer()[0]

    def production(self) -> PointerRecord | None:
        """The production record (with the pointer's ``etag`` to pass to :meth:`promote`), or ``None``."""
        return self.production_and_etag()[0]

    def production_and_etag(self) -> tuple[PointerRecord | None, str | None]:
        """The production record and the ETag :meth:`promote` expects (also when the pointer holds no record yet),
        from one read: a promotion or rollback between two reads would pair one pointer's record with another's."""
        history, etag = self._read_pointer()
        return (history[-1].model_copy(update={"etag": etag}) if history else None), etag

    def published_onnx_sha256(self, version: str) -> str | None:
        """The sha256 of the ONNX graph ``version``'s model card names, if it has a readable card."""
        card = get_json(self.client, self.settings, f"{self.prefix}{version}/{CARD_NAME}")
        onnx = card[0].get("onnx") if card is not None and isinstance(card[0], dict) else None
        return onnx.get("sha256") if isinstance(onnx, dict) else None

    def _published_gates_passed(self, version: str) -> bool:
        gates = get_json(self.client, self.settings, f"{self.prefix}{version}/{GATES_NAME}")
        return gates is None or (isinstance(gates[0], dict) and bool(gates[0].get("passed", False)))

    def repair(self, version: str | None = None) -> PointerRecord | None:
        """Rebuild a corrupt pointer, as a conditional write over the corrupt one (a concurrent fix wins).

        The valid records of the old document that name published versions are kept, in order; then ``version``
        (or, when nothing could be kept, the newest published version whose gates passed) is promoted with a
        ``repair`` note in ``by``. Returns the production record afterwards (``None``: no production). A valid
        pointer is left alone unless ``version`` asks for a change.
        """
        state = self.pointer_state()
        if state.problem is None and version is None:
            return self.production()
        published = set(self.versions())
        history = self._salvage(published) if state.problem is not None else state.history
        target = version or (None if history else next(
            (v for v in reversed(sorted(published)) if self._published_gates_passed(v)), None))
        if target is not None and target not in published:
            raise VersionNotFound(f"{self.version_uri(target)} is not a published version "
                                  f"(see `mavias registry list --name {self.name}`)")
        if target is None and not history and published:
            raise CorruptPointer(f"model {self.name}: no published version passed its gates, so none is chosen as "
                                 f"production; choose one: mavias registry repair --name {self.name} --version VERSION")
        if target is not None and (not history or history[-1].version != target):
            if self._append(history, state.etag, target, "promote", by=f"repair by {self.actor}") is None:
                raise PromotionConflict(f"model {self.name}: the pointer changed during the repair; nothing written")
        elif state.problem is not None and not history and not published:
            # no version to promote yet: no pointer at all (an empty one would read as a lost history once one is)
            self.client.delete_object(Bucket=self.settings.bucket, Key=self.pointer_key)
        elif state.problem is not None:
            try:
                self._write(history, state.etag)
            except ClientError as err:
                if is_condition_failure(err):
                    raise PromotionConflict(f"model {self.name}: the pointer changed during the repair") from err
                raise
        log.warning("model %s: production pointer repaired, production is %s", self.name, target or "(none)")
        return self.production()

    def _salvage(self, published: set[str]) -> list[PointerRecord]:
        """The longest consistent prefix of readable records of the corrupt pointer naming published versions."""
        raw = self._get_pointer_object()
        try:
            records: Any = json.loads(raw[0]).get("history", []) if raw else []
        except (ValueError, AttributeError):
            return []
        kept: list[PointerRecord] = []
        for item in records if isinstance(records, list) else []:
            try:
                record = PointerRecord.model_validate(item).model_copy(update={"seq": len(kept) + 1})
            except ValidationError:
                break
            if record.version not in published or production_stack_or_none([*kept, record]) is None:
                break
            kept.append(record)
        return kept

    def promote(self, version: str, expected_current: str | None) -> bool:
        """Make ``version`` production if the pointer still has ETag ``expected_current`` (``None``: no pointer yet).

        Returns False, writing nothing, when another promotion or rollback got there first; the caller's
        decision was based on a production that is no longer current.
        """
        self.require_published(version)
        history, etag = self._read_pointer()
        if etag != expected_current:
            return False
        if history and history[-1].version == version:
            raise NothingToChange(f"{version} is already in production: nothing to promote",
                                  hint=f"`mavias registry show --name {self.name}` shows the history")
        return self._append(history, etag, version, "promote") is not None

    def rollback(self) -> PointerRecord:
        """Restore the version that was production before the current one, as a new (conditional) pointer write."""
        history, etag = self._read_pointer()
        stack = production_stack(history)
        if len(stack) < 2:
            raise NothingToChange(f"model {self.name}: no earlier production version to roll back to",
                                  hint=f"promote a published version instead (`mavias registry list --name "
                                  f"{self.name}`, then `mavias registry promote VERSION`)")
        record = self._append(history, etag, stack[-2], "rollback")
        if record is None:
            raise PromotionConflict(f"model {self.name}: production changed during the rollback; nothing written")
        return record

    def _append(
        self,
        history: list[PointerRecord],
        etag: str | None,
        version: str,
        action: Literal["promote", "rollback"],
        *,
        by: str | None = None,
    ) -> PointerRecord | None:
        """Conditionally write the pointer with one more record; the record, or ``None`` when another writer won."""
        record = PointerRecord(
            seq=len(history) + 1,
            version=version,
            action=action,
            previous_version=history[-1].version if history else None,
            at=_now(),
            by=by or self.actor,
            token=uuid.uuid4().hex,
        )
        try:
            self._write([*history, record], etag)
        except ClientError as err:
            if not (is_condition_failure(err) or err.response.get("Error", {}).get("Code") == "NoSuchKey"):
                raise
            # A retried PUT is refused when its first attempt landed but the reply was lost: check whose write is there.
            current = self.production()
            if current is None or current.token != record.token:
                log.warning("model %s: %s of %s lost to a concurrent pointer update", self.name, action, version)
                return None
        log.info("model %s: %s %s (seq %d)", self.name, action, version, record.seq)
        return record

    def _write(self, history: list[PointerRecord], etag: str | None) -> None:
        document = PointerDocument(name=self.name, history=history).model_dump(mode="json")
        put_json(self.client, self.settings, self.pointer_key, document, if_match=etag, if_none_match=etag is None)


def _now() -> str:
    return datetime.now(UTC).isoformat()
