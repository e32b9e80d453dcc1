"""Whether the bucket honours conditional writes, which the nightly's guarantees rest on.

The ledger of processed partitions, the version markers and the report attempts are created once
(``If-None-Match: *``) and the production pointer is replaced only while it is still what was read (``If-Match``).
A store that ignores those headers accepts every such write, so two writers could both win without either knowing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from mavias.storage.s3 import S3Settings, is_condition_failure, is_not_implemented, put_json

PROBE_PAYLOAD = {"purpose": "checks that the store refuses a write whose If-None-Match or If-Match fails"}
SUPPORTING_STORES = "AWS S3, MinIO from 2024 on, moto_server"


def conditional_write_problem(client: BaseClient, settings: S3Settings) -> str | None:
    """Why the bucket is not safe for the ledger and the production pointer, in one line, or None when it refuses
    (412) both a second create of one object (``If-None-Match: *``) and a write with a wrong ETag (``If-Match``).

    It writes a probe object ``<state_prefix>probe/conditional-<uuid>.json`` and deletes it; transient errors of
    the store propagate."""
    key = f"{settings.state_prefix}probe/conditional-{uuid.uuid4().hex}.json"
    if _refused(lambda: put_json(client, settings, key, PROBE_PAYLOAD, if_none_match=True)) is None:
        ignored = ["If-None-Match"]  # not even a first create with it
    else:
        try:
            ignored = _ignored_conditions(client, settings, key)
        finally:
            client.delete_object(Bucket=settings.bucket, Key=key)
    if not ignored:
        return None
    endpoint = settings.endpoint_url or f"AWS S3 ({settings.region})"
    return (f"the store at {endpoint} (bucket {settings.bucket}) ignores or does not support "
            f"{' and '.join(ignored)}: the ledger of processed partitions and the production pointer are not safe "
            f"there; use a store that supports conditional writes ({SUPPORTING_STORES})")


def _ignored_conditions(client: BaseClient, settings: S3Settings, key: str) -> list[str]:
    """The conditions the store ignored when writing over the existing object ``key``."""
    wrong_etag = f'"{uuid.uuid4().hex}"'
    writes = {
        "If-None-Match": lambda: put_json(client, settings, key, PROBE_PAYLOAD, if_none_match=True),
        "If-Match": lambda: put_json(client, settings, key, PROBE_PAYLOAD, if_match=wrong_etag),
    }
    return [condition for condition, write in writes.items() if not _refused(write)]


def _refused(write: Callable[[], object]) -> bool | None:
    """True when the store refused ``write`` because its condition failed, False when it wrote, None when it does
    not implement the condition (501)."""
    try:
        write()
    except ClientError as err:
        if is_condition_failure(err):
            return True
        if is_not_implemented(err):
            return None
        raise
    return False
