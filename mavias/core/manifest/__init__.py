"""Dataset manifest: the one input contract of every stage.

A manifest is a table with one row per image:

- ``sample_id``: stable id derived from the image bytes (see :func:`content_sample_id`), never from row order;
- ``uri``: a path relative to the manifest's folder, an absolute path, or an ``s3://`` URI;
- ``label``: class name; ``split``: one of ``train``, ``val``, ``test`` or an evaluation split declared in ``dataset.json``;
- optional ``tags`` (list of strings) and optional group attributes ``attr_<name>``.
"""

from mavias.core.manifest.checks import small_class_warnings
from mavias.core.manifest.info import DatasetInfo, read_dataset_info, write_dataset_info
from mavias.core.manifest.io import (
    ATTR_PREFIX,
    MANIFEST_NAME,
    SPLITS,
    ManifestError,
    content_sample_id,
    load_manifest,
    read_manifest_table,
    resolve_uri,
    save_manifest,
    validate_manifest,
)
from mavias.core.manifest.quarantine import quarantine_undecodable

__all__ = [
    "ATTR_PREFIX",
    "DatasetInfo",
    "MANIFEST_NAME",
    "SPLITS",
    "ManifestError",
    "content_sample_id",
    "load_manifest",
    "quarantine_undecodable",
    "read_dataset_info",
    "read_manifest_table",
    "resolve_uri",
    "save_manifest",
    "small_class_warnings",
    "validate_manifest",
    "write_dataset_info",
]
