"""Files on disk: the size of a folder tree, the digest of a file."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file, read in chunks."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def tree_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (0 when it does not exist); links are not followed."""
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
