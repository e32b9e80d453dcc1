"""Tags that arrive with the data (the manifest's ``tags`` column) pass through as certain tags (score 1.0)."""

from __future__ import annotations

from mavias.core.tagging.base import ScoredTags, TagBatch
from mavias.errors import UserError


class ManifestTagger:
    tagger_id = "manifest"
    preprocess = None

    def tag(self, batch: TagBatch) -> list[ScoredTags]:
        if "tags" not in batch.rows.columns:
            raise UserError("the manifest has no 'tags' column", hint="use an image tagger (--tagger openclip), or "
                            "import the data with its tags (mavias data import ... --tags tags.csv)")
        return [[(tag, 1.0) for tag in sorted(set(tags))] for tags in batch.rows["tags"]]
