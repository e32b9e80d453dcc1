"""Model registry in S3: immutable versions, an atomically updated production pointer, full history, rollback.

Layout under ``models/<name>/``::

    <version>/...              the version's files, each created with If-None-Match (never overwritten)
    <version>/_version.json    written last: a version exists (and can be promoted) once this marker does
    production.json            the pointer: every promotion and rollback so far, the last one is production

The pointer is a single object, so production and its history change together in one conditional PUT
(If-Match on the ETag the caller read, If-None-Match when there was no pointer yet). S3 applies a
conditional write atomically: of several writers holding the same ETag exactly one succeeds, the others
get 412 PreconditionFailed (or 409 ConditionalRequestConflict) and lose. Nothing is ever deleted.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from botocore.client import BaseClient
from botocore.exceptions import ClientError
from pydantic import BaseModel, Field

from mavias.pipeline.storage import (
    S3Settings,
    create_json,
    get_json,
    is_condition_failure,
    list_objects,
    put_json,
    s3_uri,
    upload_dir,
)

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
VERSION_MARKER = "_version.json"
POINTER_NAME = "production.json"


class RegistryError(RuntimeError):
    pass


class VersionExists(RegistryError):
    pass


class VersionNotFound(RegistryError):
    pass


class PromotionConflict(RegistryError):
    """The pointer changed between reading and writing it: somebody else promoted or rolled back first."""


class PointerRecord(BaseModel):
    """One write of the production pointer."""

    seq: int
    version: str
    action: Literal["promote", "rollback"]
    previous_version: str | None
    at: datetime
    by: str
    token: str  # unique per write, tells a writer whether the pointer holds its own write
    etag: str | None = Field(default=None, exclude=True)  # ETag of the pointer this was read from; see promote()


def _check_name(kind: str, value: str) -> str:
    if not NAME_PATTERN.match(value):
        raise RegistryError(f"invalid {kind} {value!r}: use letters, digits, '.', '_' or '-'")
    return value


def production_stack(history: list[PointerRecord]) -> list[str]:
    """Versions a rollback walks back through: promotions push, rollbacks pop; the last one is production."""
    stack: list[str] = []
    for record in history:
        if record.action == "promote":
            stack.append(record.version)
        else:
            stack.pop()
    return stack


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

    def _is_published(self, version: str) -> bool:
        marker = f"{self.prefix}{_check_name('version', version)}/{VERSION_MARKER}"
        return get_json(self.client, self.settings, marker) is not None

    def publish_version(self, local_dir: str | Path, version: str) -> str:
        """Upload every file of ``local_dir`` as ``version``; raise :class:`VersionExists` rather than overwrite."""
        version_prefix = f"{self.prefix}{_check_name('version', version)}/"
        if next(list_objects(self.client, self.settings, version_prefix), None) is not None:
            raise VersionExists(f"{self.version_uri(version)} already exists; versions are immutable")
        try:
            keys = upload_dir(self.client, self.settings, local_dir, version_prefix, if_none_match=True)
            if not keys:
                raise RegistryError(f"{local_dir}: no files to publish")
            files = [key[len(version_prefix) :] for key in keys]
            marker = {"version": version, "files": files, "at": _now(), "by": self.actor}
            created = create_json(self.client, self.settings, version_prefix + VERSION_MARKER, marker)
        except ClientError as err:
            if is_condition_failure(err):
                raise VersionExists(f"{self.version_uri(version)} is being published concurrently") from err
            raise
        if not created:
            raise VersionExists(f"{self.version_uri(version)} was published concurrently")
        log.info("model %s: published %s", self.name, self.version_uri(version))
        return self.version_uri(version)

    def _read_pointer(self) -> tuple[list[PointerRecord], str | None]:
        found = get_json(self.client, self.settings, self.pointer_key)
        if found is None:
            return [], None
        document, etag = found
        return [PointerRecord.model_validate(r) for r in document["history"]], etag

    def history(self) -> list[PointerRecord]:
        """Every promotion and rollback, oldest first."""
        return self._read_pointer()[0]

    def production(self) -> PointerRecord | None:
        """The production record (with the pointer's ``etag`` to pass to :meth:`promote`), or ``None``."""
        history, etag = self._read_pointer()
        return history[-1].model_copy(update={"etag": etag}) if history else None

    def promote(self, version: str, expected_current: str | None) -> bool:
        """Make ``version`` production if the pointer still has ETag ``expected_current`` (``None``: no pointer yet).

        Returns False, writing nothing, when another promotion or rollback got there first; the caller's
        decision was based on a production that is no longer current.
        """
        if not self._is_published(version):
            raise VersionNotFound(f"{self.version_uri(version)} is not a published version")
        history, etag = self._read_pointer()
        if etag != expected_current:
            return False
        if history and history[-1].version == version:
            raise RegistryError(f"{version} is already in production")
        return self._append(history, etag, version, "promote") is not None

    def rollback(self) -> PointerRecord:
        """Restore the version that was production before the current one, as a new (conditional) pointer write."""
        history, etag = self._read_pointer()
        stack = production_stack(history)
        if len(stack) < 2:
            raise RegistryError(f"model {self.name}: no earlier production version to roll back to")
        record = self._append(history, etag, stack[-2], "rollback")
        if record is None:
            raise PromotionConflict(f"model {self.name}: production changed during the rollback; nothing written")
        return record

    def _append(
        self, history: list[PointerRecord], etag: str | None, version: str, action: Literal["promote", "rollback"]
    ) -> PointerRecord | None:
        """Conditionally write the pointer with one more record; the record, or ``None`` when another writer won."""
        record = PointerRecord(
            seq=len(history) + 1,
            version=version,
            action=action,
            previous_version=history[-1].version if history else None,
            at=_now(),
            by=self.actor,
            token=uuid.uuid4().hex,
        )
        document = {"name": self.name, "history": [r.model_dump(mode="json") for r in [*history, record]]}
        try:
            put_json(self.client, self.settings, self.pointer_key, document, if_match=etag, if_none_match=etag is None)
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


def _now() -> str:
    return datetime.now(UTC).isoformat()
