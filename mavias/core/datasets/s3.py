"""The ImageFolder layout under an S3 prefix (any S3-compatible endpoint), through :mod:`mavias.storage.s3`.

Manifest uris are ``s3://bucket/key``; the bytes are read once to derive the content ``sample_id``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mavias.core.datasets.base import ImportResult, build_import, check_image_bytes
from mavias.core.datasets.imagefolder import SplitOptions, layout_rows
from mavias.core.manifest import DatasetInfo
from mavias.errors import UserError
from mavias.storage.s3 import S3Settings, list_objects, load_settings, make_s3_client


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix ending in "/" or empty) of ``s3://bucket/prefix/``."""
    if not uri.startswith("s3://") or len(uri) <= len("s3://"):
        raise UserError(f"{uri!r} is not an s3:// URI; write it as s3://bucket/prefix/")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def settings_for(uri: str, *, config: str | None = None, endpoint_url: str | None = None,
                 environ: Mapping[str, str] = os.environ) -> S3Settings:
    """Storage settings (YAML config < ``MAVIAS_S3_*`` environment) for the bucket named in ``uri``."""
    bucket, _ = parse_s3_uri(uri)
    settings = load_settings(config, environ={**environ, "MAVIAS_S3_BUCKET": bucket})
    return settings.model_copy(update={"endpoint_url": endpoint_url}) if endpoint_url else settings


def import_s3(uri: str, settings: S3Settings, options: SplitOptions = SplitOptions(), *, progress: bool = True) -> ImportResult:
    _, prefix = parse_s3_uri(uri)
    client = make_s3_client(settings)
    names = [obj.key[len(prefix) :] for obj in list_objects(client, settings, prefix)]
    rows = layout_rows(names, options)
    rows["uri"] = [f"s3://{settings.bucket}/{prefix}{name}" for name in rows["name"]]

    def read(object_uri: str) -> bytes:
        key = object_uri[len(f"s3://{settings.bucket}/") :]
        try:
            response = client.get_object(Bucket=settings.bucket, Key=key)
        except client.exceptions.NoSuchKey:
            raise FileNotFoundError(object_uri) from None
        with response["Body"] as body:
            check_image_bytes(response["ContentLength"])
            return body.read()

    info = DatasetInfo(name=prefix.strip("/").rsplit("/", 1)[-1] or settings.bucket, source=uri)
    return build_import(rows.drop(columns="name"), info, read=read, workers=settings.max_workers * 2, progress=progress)
