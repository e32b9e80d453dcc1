"""Taggers: images -> tags with scores (OpenCLIP zero-shot tagger in ``mavias.core.tagging.openclip``, manifest tags;
tagging a partition in shards in ``mavias.core.tagging.run``). Importing the package does not import torch."""

from mavias.core.tagging.base import (
    CLASS_TAG_COUNT_COLUMNS,
    TAGS_COLUMNS,
    TagBatch,
    Tagger,
    class_tag_counts,
    read_tags,
    tag_lists,
    tags_table,
    write_tags,
)
from mavias.core.tagging.manifest_tags import ManifestTagger

__all__ = [
    "CLASS_TAG_COUNT_COLUMNS",
    "TAGS_COLUMNS",
    "ManifestTagger",
    "TagBatch",
    "Tagger",
    "class_tag_counts",
    "read_tags",
    "tag_lists",
    "tags_table",
    "write_tags",
]
