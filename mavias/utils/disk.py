"""Files on disk: the files of a folder tree, its size, the digest of a file or of a folder tree."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mavias.errors import UserError


def files_under(root: Path) -> list[Path]:
    """Every file under ``root`` (links to folders not followed); a sub-folder that cannot be read is a
    :class:`UserError` naming it, where ``Path.rglob`` would skip it and lose its images without a word."""
    def refuse(error: OSError) -> None:
        raise UserError(f"{error.filename} cannot be read ({error.strerror or error}): its images would be left out",
                        hint="fix its permissions, or move it out of the dataset folder") from None

    return [Path(folder) / name for folder, _, names in os.walk(root, onerror=refuse) for name in sorted(names)]


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file, read in chunks."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_tree(folder: Path) -> str:
    """The hex sha256 of a folder's files: their paths within it and their contents (a model saved there)."""
    digest = hashlib.sha256()
    for path in sorted(files_under(folder)):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def tree_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (0 when it does not exist); links are not followed."""
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
