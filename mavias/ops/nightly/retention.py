"""Retention (``clean_up``, the last step of every night before its closing check): the workspace keeps what later
nights, resumes and production need and deletes the rest, so months of nights fit on one volume (docs/operations.md,
Retention).

Kept: the ``retention.keep_datasets`` prepared datasets used last (``training/<digest>/``, each with its trainings)
plus tonight's and production's, the decoded images they read (``decoded/<key>/``), the newest ``retention.keep_nights`` night folders plus production's night and any
night whose report is not uploaded yet, and production's downloaded checkpoint. When production cannot be read,
nothing is deleted. Pulled partitions, discovery (tags, decisions, embeddings), the outbox and the history are never
deleted: every night trains on all partitions and asks nothing twice.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import TypedDict

from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import DECODED_KEYS_NAME, REPORTS_DIR, layout, registry
from mavias.ops.nightly.release import version_origin
from mavias.ops.nightly.report import ATTEMPT_PREFIX, UPLOADED_SUFFIX
from mavias.ops.registry import CorruptPointer
from mavias.utils.disk import tree_size

log = logging.getLogger(__name__)

MANAGED = ("training", "decoded", "nights", "production")  # the folders retention deletes in


class Pruned(TypedDict):
    """``retention.clean_up``: what was deleted, whose data was kept, and the size of what it manages after."""

    deleted: list[str]  # workspace-relative folders
    production: str | None  # the version whose data was kept (None: none, or unreadable: then nothing was deleted)
    kept_bytes: int  # what retention manages (training/, decoded/, nights/, production/) after it


class RetentionIncomplete(RuntimeError):
    """Folders retention meant to delete are still there (the rest were deleted)."""


def _report_pending(night: Path) -> bool:
    """A report attempt of the night not uploaded yet (a later report uploads it)."""
    return any(not attempt.with_name(attempt.name + UPLOADED_SUFFIX).exists()
               for attempt in night.glob(f"{REPORTS_DIR}/{ATTEMPT_PREFIX}*") if attempt.is_dir())


def _newest(folders: list[Path], keep: int) -> set[Path]:
    return set(sorted(folders, key=lambda path: path.stat().st_mtime, reverse=True)[:keep])


def _production_version(cfg: NightlyConfig) -> tuple[str | None, bool]:
    """(production's version, whether it is known)."""
    try:
        record = registry(cfg, step="clean_up").production()
    except CorruptPointer:
        return None, False
    return (record.version if record else None), True


def _stale(cfg: NightlyConfig, tonight: str, digest: str | None, production: str | None) -> list[Path]:
    """Folders no later night, resume or production needs."""
    root = layout(cfg).root
    night, short_digest = version_origin(production or "")
    trainings = [path for path in (root / "training").glob("*") if path.is_dir()]
    keep = _newest(trainings, cfg.retention.keep_datasets)
    keep |= {path for path in trainings if path.name == digest or (short_digest and path.name.startswith(short_digest))}
    nights = sorted((path for path in layout(cfg).nights.glob("*") if path.is_dir()), reverse=True)
    keys = set().union(*(_decoded_keys(path) for path in keep))
    return ([path for path in trainings if path not in keep]
            + [path for path in (root / "decoded").glob("*") if path.is_dir() and path.name not in keys]
            + [path for path in nights[cfg.retention.keep_nights :]
               if path.name not in (night, tonight) and not _report_pending(path)]
            + [path for path in (root / "production").glob("*") if path.is_dir() and path.name != production])


def _decoded_keys(training: Path) -> set[str]:
    record = training / "dataset" / DECODED_KEYS_NAME
    return set(json.loads(record.read_text())) if record.exists() else set()


def clean_up(cfg: NightlyConfig, tonight: str, digest: str | None = None) -> Pruned:
    """Delete what retention does not keep (``digest``: tonight's dataset, when one was prepared). Idempotent.
    :class:`RetentionIncomplete` names the folders it could not delete, after deleting the others."""
    production, known = _production_version(cfg)
    root = layout(cfg).root
    if not known:
        log.warning("the production pointer is unreadable: nothing is deleted tonight")
    deleted, undeletable = [], {}
    for folder in _stale(cfg, tonight, digest, production) if known else []:
        name = folder.relative_to(root).as_posix()
        try:
            shutil.rmtree(folder)
        except FileNotFoundError:
            pass  # gone already (a concurrent clean-up): deleted all the same
        except OSError as err:
            undeletable[name] = f"{type(err).__name__}: {err}"
            continue
        deleted.append(name)
    if known:
        dropped = layout(cfg).decoded.prune(path.name for path in (root / "decoded").glob("*") if path.is_dir())
        log.info("retention: %d decoded image(s) of files gone or replaced dropped", dropped)
    kept = sum(tree_size(root / name) for name in MANAGED)
    log.info("retention: deleted %d folder(s) %s; %.1f MB kept in training/, decoded/, nights/ and production/",
             len(deleted), deleted, kept / 1e6)
    if undeletable:
        raise RetentionIncomplete(
            f"retention could not delete {len(undeletable)} folder(s) of {root} ({undeletable}): the disk keeps "
            f"filling until they go; fix their permissions or delete them by hand (the next night tries again)")
    return {"deleted": deleted, "production": production, "kept_bytes": kept}
