"""The tag vocabulary: common visual concepts an image tagger may name, one per line."""

from __future__ import annotations

from pathlib import Path

from mavias.errors import UserError
from mavias.utils.userfiles import read_text

DEFAULT_VOCABULARY = Path(__file__).with_name("default.txt")
MAX_TAG_LENGTH = 64


class VocabularyError(UserError, ValueError):
    """A vocabulary file that is empty or holds an unusable entry."""


def load_vocabulary(path: str | Path | None = None) -> list[str]:
    """Tags of ``path`` (default: the shipped vocabulary), lowercased, whitespace-normalised, deduplicated in order.

    Blank lines and lines starting with ``#`` are skipped.
    """
    path = Path(path) if path is not None else DEFAULT_VOCABULARY
    tags: dict[str, None] = {}
    for number, line in enumerate(read_text(path, what="vocabulary", error=VocabularyError).splitlines(), start=1):
        tag = " ".join(line.strip().lower().split())
        if not tag or tag.startswith("#"):
            continue
        if len(tag) > MAX_TAG_LENGTH or not tag.isprintable() or "," in tag:
            raise VocabularyError(f"{path}:{number}: unusable tag {line.strip()!r} (printable, no comma, <= 64 chars)")
        tags[tag] = None
    if not tags:
        raise VocabularyError(f"{path} holds no tags")
    return list(tags)
