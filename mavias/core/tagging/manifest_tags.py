"""Tags that arrive with the data (the manifest's ``tags`` column) pass through as certain tags (score 1.0)."""

from __future__ import annotations

from mavias.core.tagging.base import ScoredTags, TagBatch


class ManifestTagger:
    tagger_id = "manifest"
    preprocess = None

    def tag(self, batch: TagBatch) -> list[ScoredTags]:
        if "tags" not in batch.rows.columns:
            raise ValueError("the manifest has no 'tags' column: use an image tagger (e.g. --tagger openclip)")
        return [[(tag, 1.0) for tag in sorted(set(tags))] for tags in batch.rows["tags"]]
