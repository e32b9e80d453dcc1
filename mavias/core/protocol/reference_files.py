"""The files a reference's run folder holds beside its checkpoint, and what they say, readable without torch (the
report tasks read them)."""

from __future__ import annotations

import json
from pathlib import Path

BIASED_TAGS_FILE = "biased_tags.csv"  # B': one row per biased (class, tag)
EVIDENCE_FILE = "shortcut_evidence.csv"  # every (class, tag) pair tested, with its evidence
PAPER_TAGS_FILE = "biased_tags_paper.csv"  # B' by the paper's rule, reported alongside
DISCOVERY_FILE = "biased_tags.json"  # what B' was computed from (a cache key)


def rule_version(run_dir: str | Path) -> int | None:
    """The version of the B' rule that computed the run folder's B' (None: a folder from before it was kept)."""
    meta = Path(run_dir) / DISCOVERY_FILE
    return json.loads(meta.read_text()).get("rule_version") if meta.is_file() else None
