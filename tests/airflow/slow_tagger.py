"""A manifest tagger that takes its time, so a test can kill a night in the middle of tagging."""

from __future__ import annotations

import os
import time

from mavias.core.tagging import ManifestTagger, TagBatch
from mavias.core.tagging.base import ScoredTags

DELAY_ENV = "MAVIAS_TEST_TAG_DELAY_S"


class SlowManifestTagger(ManifestTagger):
    tagger_id = "manifest-slow"

    def tag(self, batch: TagBatch) -> list[ScoredTags]:
        time.sleep(float(os.environ.get(DELAY_ENV, "1")))
        return super().tag(batch)
