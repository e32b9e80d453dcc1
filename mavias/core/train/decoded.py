"""Decoded images kept on disk, one file per group of images (a nightly partition) and transform, so an image is
decoded once however many datasets it joins: a night that adds a partition decodes that partition only.

A group is the first ``depth`` folders of an image's path under ``root`` (``partitions/<name>``); its file is
``<folder>/<transform key>/<group>.pt`` (tensors and names, read with ``weights_only`` and memory-mapped, so reading
which images a file holds costs no image). An entry is used only while its image file is the one it was decoded
from (same size, modification time and inode: an atomic replace makes a new inode); a file replaced since is decoded
again, and entries of files gone are dropped (:meth:`DecodedStore.prune`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mavias.core.train.transforms import Transform, load_transformed
from mavias.utils.atomic import atomic_path
from mavias.utils.progress import progress_bar
from mavias.utils.torchfile import TORCH_LOAD_ERRORS

log = logging.getLogger(__name__)

FORMAT = "mavias-decoded-2"
OUTSIDE_ROOT = "_outside"  # the group of an image that does not lie under the root
Stamp = tuple[int, int, int]  # size, mtime_ns, inode
Entries = dict[str, tuple[Stamp, torch.Tensor]]  # name within the group -> (stamp, image)


def transform_key(transform: Transform) -> str:
    """Names a transform by its parameters (torchvision's repr lists them), so a changed image size is a new key."""
    return hashlib.sha256(repr(transform).encode()).hexdigest()[:12]


def _stamp(path: Path) -> Stamp | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


@dataclass(frozen=True)
class DecodedStore:
    folder: Path
    root: Path
    depth: int = 2

    def state(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "root": str(self.root), "depth": self.depth}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> DecodedStore:
        return cls(Path(state["folder"]), Path(state["root"]), int(state["depth"]))

    def group_of(self, path: Path) -> tuple[str, str]:
        """(group, name within the group) of an image path."""
        try:
            parts = path.resolve().relative_to(self.root.resolve()).parts
        except ValueError:
            return OUTSIDE_ROOT, str(path.resolve())
        if len(parts) <= self.depth:
            return OUTSIDE_ROOT, str(path.resolve())
        return "__".join(parts[: self.depth]), "/".join(parts[self.depth :])

    def _by_group(self, paths: Iterable[Path]) -> dict[str, list[tuple[Path, str]]]:
        members: dict[str, list[tuple[Path, str]]] = defaultdict(list)
        for path in paths:
            group, name = self.group_of(path)
            members[group].append((path, name))
        return members

    def held(self, paths: Iterable[Path]) -> set[Path]:
        """The ``paths`` whose current file some transform's file holds decoded (so it is known to decode)."""
        found = set()
        for group, entries in self._by_group(paths).items():
            stamps = {name: stamp for file in self.folder.glob(f"*/{group}.pt")
                      for name, (stamp, _) in _read(file).items()}
            found |= {path for path, name in entries if name in stamps and stamps[name] == _stamp(path)}
        return found

    def load(self, paths: list[Path], transform: Transform, desc: str | None = None) -> list[torch.Tensor]:
        """The images of ``paths`` through ``transform``, decoding (and storing) only those no file holds."""
        key = transform_key(transform)
        images: dict[Path, torch.Tensor] = {}
        for group, entries in self._by_group(paths).items():
            images.update(self._load_group(self.folder / key / f"{group}.pt", entries, transform, desc))
        return [images[path] for path in paths]

    def _load_group(self, file: Path, entries: list[tuple[Path, str]], transform: Transform,
                    desc: str | None) -> dict[Path, torch.Tensor]:
        held = _read(file)
        stamps = {path: _stamp(path) for path, _ in entries}
        todo = [(path, name) for path, name in entries if name not in held or held[name][0] != stamps[path]]
        for path, name in progress_bar(todo, desc=desc or "decoding images", enabled=bool(desc and todo)):
            held[name] = (stamps[path] or (0, 0, 0), load_transformed(path, transform))  # a missing file raises
        if todo:
            _write(file, held)
            log.info("decoded %d image(s) into %s (%d held before)", len(todo), file, len(entries) - len(todo))
        return {path: held[name][1] for path, name in entries}

    def prune(self, keys: Iterable[str]) -> int:
        """Drop the entries of image files that are gone or replaced, in the files of ``keys``; how many."""
        dropped = 0
        for file in (path for key in keys for path in (self.folder / key).glob("*.pt")):
            held = _read(file)
            base = self.root.joinpath(*file.stem.split("__", self.depth - 1)) if file.stem != OUTSIDE_ROOT else None
            kept = {name: entry for name, entry in held.items()
                    if _stamp(base / name if base else Path(name)) == entry[0]}
            if len(kept) == len(held):
                continue
            dropped += len(held) - len(kept)
            if kept:
                _write(file, kept)
            else:
                file.unlink()
        return dropped


def _read(file: Path) -> Entries:
    """A group file's entries; an unreadable or malformed file is decoded again, so it holds nothing."""
    if not file.exists():
        return {}
    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"not of format {FORMAT}")
        return {name: ((int(size), int(mtime), int(inode)), image) for name, (size, mtime, inode), image
                in zip(state["names"], state["stamps"].tolist(), state["images"], strict=True)}
    except (*TORCH_LOAD_ERRORS, KeyError, TypeError, ValueError, AttributeError) as error:
        log.warning("%s is unreadable (%s): its images are decoded again", file, str(error).splitlines()[0])
        return {}


def _write(file: Path, held: Entries) -> None:
    names = sorted(held)
    stamps = torch.tensor([held[n][0] for n in names], dtype=torch.int64).reshape(len(names), 3)
    state = {"format": FORMAT, "names": names, "stamps": stamps, "images": [held[n][1] for n in names]}
    file.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(file) as tmp:
        torch.save(state, tmp)
