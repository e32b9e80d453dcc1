"""Retention (``clean_up``, the last step of every night): the workspace keeps what later nights, resumes and
production need and deletes the rest, so months of nights fit on one volume (docs/operations.md, Retention).

Kept: the newest ``retention.keep_datasets`` prepared datasets (``training/<digest>/``, each with its trainings)
plus tonight's and production's, the newest ``retention.keep_nights`` night folders plus production's night, and
production's downloaded checkpoint. Pulled partitions, discovery (tags, decisions, embeddings), the outbox and the
history are never deleted: every night trains on all partitions and asks nothing twice.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TypedDict

from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import layout, registry
from mavias.ops.registry import CorruptPointer

log = logging.getLogger(__name__)


class Pruned(TypedDict):
    """``retention.clean_up``: what was deleted, what is kept, and the workspace's size after."""

    deleted: list[str]  # workspace-relative folders
    production: str | None  # the version whose data was kept (None: unknown tonight, so no dataset was deleted)
    workspace_bytes: int


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _newest(folders: list[Path], keep: int) -> set[Path]:
    return set(sorted(folders, key=lambda path: path.stat().st_mtime, reverse=True)[:keep])


def _production_version(cfg: NightlyConfig) -> tuple[str | None, bool]:
    """(production's version, whether it is known): an unreadable pointer keeps every dataset."""
    try:
        record = registry(cfg, step="clean_up").production()
    except CorruptPointer:
        return None, False
    return (record.version if record else None), True


def _stale(cfg: NightlyConfig, tonight: str, digest: str | None, production: str | None, known: bool) -> list[Path]:
    """Folders no later night, resume or production needs (``production`` is ``<night>-<digest[:8]>``)."""
    root = layout(cfg).root
    night, _, short_digest = (production or "").partition("-")
    trainings = [path for path in (root / "training").glob("*") if path.is_dir()]
    keep = _newest(trainings, cfg.retention.keep_datasets)
    keep |= {path for path in trainings if path.name == digest or (short_digest and path.name.startswith(short_digest))}
    stale = [path for path in trainings if path not in keep] if known else []
    nights = sorted((path for path in (root / "nights").glob("*") if path.is_dir()), reverse=True)
    stale += [path for path in nights[cfg.retention.keep_nights :] if path.name not in (night, tonight)]
    stale += [path for path in (root / "production").glob("*") if path.is_dir() and known and path.name != production]
    return stale


def clean_up(cfg: NightlyConfig, tonight: str, digest: str | None = None) -> Pruned:
    """Delete what retention does not keep (``digest``: tonight's dataset, when one was prepared). Idempotent."""
    production, known = _production_version(cfg)
    if not known:
        log.warning("the production pointer is unreadable: no dataset or checkpoint is deleted tonight")
    root = layout(cfg).root
    deleted = []
    for folder in _stale(cfg, tonight, digest, production, known):
        shutil.rmtree(folder, ignore_errors=True)
        deleted.append(folder.relative_to(root).as_posix())
    size = _size(root) if root.exists() else 0
    log.info("retention: deleted %d folder(s) %s; workspace %.1f MB", len(deleted), deleted, size / 1e6)
    return {"deleted": deleted, "production": production, "workspace_bytes": size}
