"""Taggers: images -> tags with scores (OpenCLIP zero-shot tagger in ``mavias.core.tagging.openclip``, manifest tags)."""

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
from mavias.core.tagging.run import TagCounts, TagsStore, collect_partition, missing_shards, parse_shard, tag_partition

__all__ = [
    "CLASS_TAG_COUNT_COLUMNS",
    "TAGS_COLUMNS",
    "ManifestTagger",
    "TagBatch",
    "TagCounts",
    "Tagger",
    "TagsStore",
    "class_tag_counts",
    "collect_partition",
    "missing_shards",
    "parse_shard",
    "read_tags",
    "tag_lists",
    "tag_partition",
    "tags_table",
    "write_tags",
]
