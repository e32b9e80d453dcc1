"""S3 storage shared by the nightly pipeline and the model server: settings, client, retries, object transfers.

Bucket layout (every prefix is configurable in :class:`S3Settings`)::

    incoming/<partition>/...                      new data, see :mod:`mavias.ops.nightly.incoming`
    state/processed/<partition>.json              the ledger of processed partitions (same module)
    quarantine/<partition>/validation.json        partitions that failed validation (delete it to retry)
    models/<name>/...                             model registry, see :mod:`mavias.ops.registry.model_registry`

Works with AWS S3, MinIO or any S3-compatible store (``endpoint_url``). Credentials come from explicit
:class:`~pydantic.SecretStr` fields (e.g. filled from an Airflow connection) or boto3's standard chain
(environment, profile, instance role); they are never logged or shown in a repr.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import boto3
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    HTTPClientError,
    IncompleteReadError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from tenacity import (
    RetryCallState,
    Retrying,
    before_sleep_log,
    retry,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from mavias.errors import UserError
from mavias.storage.deadline import StorageDeadline, reading_body, register_deadline
from mavias.storage.parallel import run_parallel
from mavias.utils.atomic import atomic_path
from mavias.utils.disk import sha256_file
from mavias.utils.mappings import read_yaml_mapping

log = logging.getLogger(__name__)

ENV_PREFIX = "MAVIAS_S3_"
CONDITION_FAILURES = {"PreconditionFailed", "ConditionalRequestConflict"}


BUCKET_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # no scheme, no folder (stores differ on the rest)
THROTTLING_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded",
                    "TooManyRequestsException", "ServiceUnavailable", "InternalError"}


class S3Settings(BaseModel):
    """Where the pipeline's objects live and how to reach them."""

    # Errors must not echo inputs: a misspelt key may hold a credential.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    bucket: str = Field(description="the bucket of incoming data, models, state and quarantine")
    endpoint_url: str | None = Field(None, description="an S3-compatible endpoint (MinIO, Ceph); null: AWS S3")
    region: str = Field("us-east-1", description="the bucket's region")
    incoming_prefix: str = Field("incoming/", description="folder of new data partitions, one subfolder each")
    models_prefix: str = Field("models/", description="folder of the model registry (versions, production pointer)")
    state_prefix: str = Field("state/", description="folder of the pipeline's state (processed partitions)")
    quarantine_prefix: str = Field("quarantine/", description="folder of refused partitions: "
                                   "<partition>/validation.json says why (its images stay under incoming/; delete "
                                   "the file to validate it again)")
    access_key_id: SecretStr | None = Field(None, description="from the environment only (MAVIAS_S3_ACCESS_KEY_ID)")
    secret_access_key: SecretStr | None = Field(None, description="from the environment only")
    session_token: SecretStr | None = Field(None, description="from the environment only (temporary credentials)")
    retry_mode: Literal["standard", "adaptive"] = Field("standard", description="botocore's retry mode")
    max_attempts: int = Field(default=5, ge=1, description="attempts per request, the first included")
    max_workers: int = Field(default=4, ge=1, description="parallel transfers")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="per connection attempt")
    read_timeout_s: float = Field(default=60.0, gt=0, description="per read of a response")
    outage_retry_s: float = Field(default=120.0, ge=0, description="how long a step retries an unreachable store")
    step_deadline_s: float = Field(default=900.0, gt=0, description="the most one nightly step waits on the store in "
                                   "all, every request and retry together; then it stops with a clear message")

    @field_validator("endpoint_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"https?://[^/\s]+", value):
            raise ValueError("must be a URL with its scheme, e.g. http://127.0.0.1:9000")
        return value

    @field_validator("incoming_prefix", "models_prefix", "state_prefix", "quarantine_prefix")
    @classmethod
    def _folder(cls, value: str) -> str:
        return folder_prefix(value)

    @field_validator("bucket")
    @classmethod
    def _bucket_name(cls, value: str) -> str:
        if not BUCKET_PATTERN.fullmatch(value):
            raise ValueError(f"{value!r} is not a bucket name (letters, digits, '.', '_' or '-'; no s3:// and no "
                             "folder: a folder goes in the *_prefix settings)")
        return value


def folder_prefix(value: str) -> str:
    """A bucket folder as a key prefix: ``a/b/`` (one trailing slash, none leading), or ``""`` for the bucket's root."""
    value = value.strip("/")
    return f"{value}/" if value else ""


def environment_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``MAVIAS_S3_<FIELD>`` variables set in ``environ``, by field name."""
    names = {f"{ENV_PREFIX}{field.upper()}": field for field in S3Settings.model_fields}
    return {field: environ[name] for name, field in names.items() if name in environ}


def load_settings(config: str | Path | None = None, environ: Mapping[str, str] = os.environ) -> S3Settings:
    """Settings from an optional YAML file (top level or an ``s3:`` section), overridden by ``MAVIAS_S3_<FIELD>``."""
    values: dict[str, Any] = {}
    if config is not None:
        data = read_yaml_mapping(config, what="S3 settings file")
        section = data.get("s3", data)
        if not isinstance(section, dict):
            raise UserError(f"{config} must be a mapping of S3 settings (at its top level or under s3:)",
                            hint="write e.g. `s3: {bucket: models, endpoint_url: http://127.0.0.1:9000}`")
        values.update(section)
    values.update(environment_settings(environ))
    try:
        return S3Settings.model_validate(values)
    except ValidationError as error:  # the inputs stay out of the message: a misspelt key may hold a credential
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in error.errors())
        where = f"the s3: section of {config}" if config is not None else "a --config YAML file's s3: section"
        raise UserError(f"invalid S3 settings: {problems}",
                        hint=f"set them in {where} or as {ENV_PREFIX}<SETTING> variables (e.g. {ENV_PREFIX}BUCKET)"
                        ) from None


def _reveal(secret: SecretStr | None) -> str | None:
    return secret.get_secret_value() if secret is not None else None


def make_s3_client(settings: S3Settings, *, deadline_s: float | None = None, step: str = "this") -> BaseClient:
    """A thread-safe S3 client whose every call is retried by botocore on throttling, 5xx and connection errors.

    With ``deadline_s`` every request of the client, its retries included, stops with :class:`StorageDeadline` once
    the client's requests have waited on the store that many seconds in all (one step's client; ``step`` names it in
    the message; the step's own work between requests does not count), and no single attempt waits longer.
    """
    session = boto3.session.Session(
        aws_access_key_id=_reveal(settings.access_key_id),
        aws_secret_access_key=_reveal(settings.secret_access_key),
        aws_session_token=_reveal(settings.session_token),
        region_name=settings.region,
    )
    config = Config(
        retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
        max_pool_connections=max(10, 2 * settings.max_workers),
        connect_timeout=min(settings.connect_timeout_s, deadline_s or settings.connect_timeout_s),
        read_timeout=min(settings.read_timeout_s, deadline_s or settings.read_timeout_s),
        # Custom endpoints (MinIO, moto) rarely resolve bucket subdomains.
        s3={"addressing_style": "path"} if settings.endpoint_url else None,
    )
    log.debug("S3 client for bucket %s at %s", settings.bucket, settings.endpoint_url or "AWS")
    client = session.client("s3", endpoint_url=settings.endpoint_url, config=config)
    if deadline_s is not None:
        register_deadline(client, settings.endpoint_url or f"S3 ({settings.region})", settings.bucket, deadline_s, step)
    return client


def is_condition_failure(err: ClientError) -> bool:
    """True when a conditional request (If-Match / If-None-Match) was refused: somebody else wrote first."""
    error = err.response.get("Error", {})
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return error.get("Code") in CONDITION_FAILURES or status in (409, 412)


def s3_uri(settings: S3Settings, key: str) -> str:
    return f"s3://{settings.bucket}/{key}"


def is_not_implemented(error: ClientError) -> bool:
    """501 NotImplemented: the store does not support what the request asks (e.g. a conditional write)."""
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 501 or error.response.get("Error", {}).get("Code") == "NotImplemented"


def is_transient(error: BaseException) -> bool:
    """Timeouts, refused or dropped connections, 5xx replies and throttling: the store, not the data, is at fault."""
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if is_not_implemented(error):  # a feature the store lacks: asking again cannot help
            return False
        return status >= 500 or error.response.get("Error", {}).get("Code") in THROTTLING_CODES
    return isinstance(error, (BotoConnectionError, HTTPClientError, IncompleteReadError, ConnectionError, TimeoutError))


def retry_transient(settings: S3Settings) -> Retrying:
    """Retries a whole step while the store is unreachable (botocore retries each request only briefly); after
    ``outage_retry_s`` the transient error is raised, for the caller to fail (and retry later), never to treat
    as bad data. A passed step deadline (:class:`StorageDeadline`) is not retried."""
    return retrying(lambda err: is_transient(err) and not isinstance(err, StorageDeadline), settings.outage_retry_s)


def _failing_for(max_delay_s: float) -> Callable[[RetryCallState], bool]:
    """Stop once the failures have lasted ``max_delay_s``, timed from the first one (tenacity's stop_after_delay
    counts from the first attempt's start: a long step failing after it would get no retry at all)."""

    def stop(state: RetryCallState) -> bool:
        first = state.__dict__.setdefault("first_failure", state.outcome_timestamp)
        return state.outcome_timestamp - first >= max_delay_s

    return stop


def retrying(is_retryable: Callable[[BaseException], bool], max_delay_s: float) -> Retrying:
    """Retry with exponential backoff while ``is_retryable(error)``, for at most ``max_delay_s`` after the first
    failure; then reraise."""
    return Retrying(
        retry=retry_if_exception(is_retryable),
        stop=_failing_for(max_delay_s),
        wait=wait_exponential(multiplier=0.5, max=15),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )


# -- objects -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    etag: str
    modified: datetime | None = None


def list_objects(client: BaseClient, settings: S3Settings, prefix: str) -> Iterator[RemoteObject]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=settings.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield RemoteObject(obj["Key"], obj["Size"], obj["ETag"], obj.get("LastModified"))


def list_folders(client: BaseClient, settings: S3Settings, prefix: str) -> list[str]:
    """Sorted names of the immediate "sub-folders" of ``prefix``."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=settings.bucket, Prefix=prefix, Delimiter="/")
    return sorted(p["Prefix"][len(prefix) :].rstrip("/") for page in pages for p in page.get("CommonPrefixes", []))


def _conditions(if_match: str | None, if_none_match: bool) -> dict[str, str]:
    if if_match is not None and if_none_match:
        raise ValueError("If-Match and If-None-Match are exclusive")
    if if_match is not None:
        return {"IfMatch": if_match}
    return {"IfNoneMatch": "*"} if if_none_match else {}


def put_json(
    client: BaseClient,
    settings: S3Settings,
    key: str,
    payload: Any,
    *,
    if_match: str | None = None,
    if_none_match: bool = False,
) -> str:
    """Write ``payload`` as JSON, optionally conditional on the current ETag or on absence; return the new ETag.

    A refused condition raises :class:`ClientError` (see :func:`is_condition_failure`).
    """
    body = json.dumps(payload, indent=2, sort_keys=True, default=str).encode()
    response = client.put_object(
        Bucket=settings.bucket,
        Key=key,
        Body=body,
        ContentType="application/json",
        **_conditions(if_match, if_none_match),
    )
    return response["ETag"]


def create_json(client: BaseClient, settings: S3Settings, key: str, payload: Any) -> bool:
    """Create ``key`` only if it does not exist (If-None-Match: *); False when it already did."""
    try:
        put_json(client, settings, key, payload, if_none_match=True)
    except ClientError as err:
        if is_condition_failure(err):
            return False
        raise
    return True


def get_json(client: BaseClient, settings: S3Settings, key: str) -> tuple[Any, str] | None:
    """(payload, ETag) of a JSON object, or ``None`` when it does not exist."""
    try:
        response = client.get_object(Bucket=settings.bucket, Key=key)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
    return json.loads(response["Body"].read()), response["ETag"]


SHA256_METADATA = "sha256"  # x-amz-meta-sha256


def upload_file(
    client: BaseClient, settings: S3Settings, path: str | Path, key: str, *, if_none_match: bool = False
) -> str:
    """Upload one file (single PUT, so at most 5 GB) with its sha256 in the object's metadata (``SHA256_METADATA``:
    the ETag is no MD5 on encrypted buckets); with ``if_none_match`` never overwrite. Returns the ETag."""
    metadata = {SHA256_METADATA: sha256_file(path)}
    with Path(path).open("rb") as body:
        response = client.put_object(Bucket=settings.bucket, Key=key, Body=body, Metadata=metadata,
                                     **_conditions(None, if_none_match))
    return response["ETag"]


def stored_sha256(client: BaseClient, settings: S3Settings, key: str) -> str | None:
    """The sha256 :func:`upload_file` stored with the object; ``None`` for an object uploaded otherwise."""
    return client.head_object(Bucket=settings.bucket, Key=key).get("Metadata", {}).get(SHA256_METADATA)


def holds_file(client: BaseClient, settings: S3Settings, key: str, etag: str, path: Path) -> bool:
    """Whether object ``key`` (of ``etag``) holds the bytes of ``path``: by the sha256 stored with it, else (an
    object uploaded otherwise) by its ETag, the MD5 of a single PUT on an unencrypted bucket."""
    stored = stored_sha256(client, settings, key)
    if stored is not None:
        return stored == sha256_file(path)
    with path.open("rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest() == etag.strip('"')


def local_files(local_dir: str | Path) -> dict[str, Path]:
    """Every file under ``local_dir`` by its relative (POSIX) path, sorted."""
    local_dir = Path(local_dir)
    return {p.relative_to(local_dir).as_posix(): p for p in sorted(local_dir.rglob("*")) if p.is_file()}


def upload_dir(
    client: BaseClient, settings: S3Settings, local_dir: str | Path, prefix: str, *, if_none_match: bool = False,
    skip: Collection[str] = (),
) -> list[str]:
    """Upload every file under ``local_dir`` to ``prefix`` + its relative path, but those named in ``skip`` (relative
    paths already there); return every file's key, sorted."""
    files = local_files(local_dir)
    keys = {path: prefix + name for name, path in files.items()}
    run_parallel(
        lambda path: upload_file(client, settings, path, keys[path], if_none_match=if_none_match),
        [path for name, path in files.items() if name not in skip],
        settings.max_workers,
        desc=f"upload {s3_uri(settings, prefix)}",
    )
    return sorted(keys.values())


def download_file(client: BaseClient, settings: S3Settings, key: str, path: str | Path, *,
                  etag: str | None = None, sync: bool = True) -> Path:
    """Download one object to ``path`` atomically: readers never see a partial file. With ``etag``, an object that
    changed since it was listed is refused (412); ``sync=False`` leaves it to :func:`mavias.utils.atomic.sync_all`."""
    _fetch(client, settings, key, Path(path), etag, sync)
    return Path(path)


# botocore retries each request; this also retries when the body breaks off after the reply has started.
@retry(
    retry=retry_if_exception_type((IncompleteReadError, HTTPClientError, BotoConnectionError)),
    stop=stop_after_attempt(3),
    wait=wait_exponential(multiplier=0.2, max=2),
    before_sleep=before_sleep_log(log, logging.WARNING),
    reraise=True,
)
def _fetch(client: BaseClient, settings: S3Settings, key: str, path: Path, etag: str | None = None,
           sync: bool = True) -> None:
    """Stream ``key`` into ``path``; with ``etag``, an object that changed since it was listed is refused (412)."""
    response = client.get_object(Bucket=settings.bucket, Key=key, **({"IfMatch": etag} if etag else {}))
    with atomic_path(path, sync=sync) as tmp, reading_body(client) as check_deadline:
        with tmp.open("wb") as fh:
            for chunk in response["Body"].iter_chunks(1 << 20):
                check_deadline()
                fh.write(chunk)
