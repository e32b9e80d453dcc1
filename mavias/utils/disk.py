"""Disk use of a folder tree."""

from __future__ import annotations

from pathlib import Path


def tree_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (0 when it does not exist); links are not followed."""
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
