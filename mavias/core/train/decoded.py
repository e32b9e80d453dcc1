"""Decoded images kept on disk, one file per group of images (a nightly partition) and transform, so an image is
decoded once however many datasets it joins: a night that adds a partition decodes that partition only.

A group is the first ``depth`` folders of an image's path under ``root`` (``partitions/<name>``); its file is
``<folder>/<transform key>/<group>.pt`` (tensors and names, read with ``weights_only``). An entry is used only while
its image file has the size and modification time it was decoded at: a file replaced since is decoded again (a file
deleted since keeps its entry: the image as it was prepared).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mavias.core.train.transforms import Transform, load_transformed
from mavias.utils.atomic import atomic_path
from mavias.utils.progress import progress_bar
from mavias.utils.torchfile import TORCH_LOAD_ERRORS

log = logging.getLogger(__name__)

FORMAT = "mavias-decoded-1"
OUTSIDE_ROOT = "_outside"  # the group of an image that does not lie under the root


def transform_key(transform: Transform) -> str:
    """Names a transform by its parameters (torchvision's repr lists them), so a changed image size is a new key."""
    return hashlib.sha256(repr(transform).encode()).hexdigest()[:12]


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


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

    def load(self, paths: list[Path], transform: Transform, desc: str | None = None) -> list[torch.Tensor]:
        """The images of ``paths`` through ``transform``, decoding (and storing) only those no file holds."""
        key = transform_key(transform)
        members: dict[str, list[tuple[Path, str]]] = defaultdict(list)
        for path in paths:
            group, name = self.group_of(path)
            members[group].append((path, name))
        images: dict[Path, torch.Tensor] = {}
        for group, entries in members.items():
            images.update(self._load_group(self.folder / key / f"{group}.pt", entries, transform, desc))
        return [images[path] for path in paths]

    def _load_group(self, file: Path, entries: list[tuple[Path, str]], transform: Transform,
                    desc: str | None) -> dict[Path, torch.Tensor]:
        held = _read(file)
        stamps = {path: _stamp(path) for path, _ in entries}
        todo = [(path, name) for path, name in entries
                if name not in held or stamps[path] not in (None, held[name][0])]
        for path, name in progress_bar(todo, desc=desc or "decoding images", enabled=bool(desc and todo)):
            held[name] = (stamps[path] or (0, 0), load_transformed(path, transform))  # a missing file raises
        if todo:
            _write(file, held)
            log.info("decoded %d image(s) into %s (%d held before)", len(todo), file, len(entries) - len(todo))
        return {path: held[name][1] for path, name in entries}


def _read(file: Path) -> dict[str, tuple[tuple[int, int], torch.Tensor]]:
    """A group file's entries (name -> (stamp, image)); an unreadable file is decoded again, so it holds nothing."""
    if not file.exists():
        return {}
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except TORCH_LOAD_ERRORS as error:
        log.warning("%s is unreadable (%s): its images are decoded again", file, str(error).splitlines()[0])
        return {}
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        log.warning("%s is not of format %s: its images are decoded again", file, FORMAT)
        return {}
    return {name: ((int(size), int(mtime)), image)
            for name, (size, mtime), image in zip(state["names"], state["stamps"].tolist(), state["images"], strict=True)}


def _write(file: Path, held: dict[str, tuple[tuple[int, int], torch.Tensor]]) -> None:
    names = sorted(held)
    state = {"format": FORMAT, "names": names, "stamps": torch.tensor([held[n][0] for n in names], dtype=torch.int64),
             "images": [held[n][1] for n in names]}
    file.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(file) as tmp:
        torch.save(state, tmp)
