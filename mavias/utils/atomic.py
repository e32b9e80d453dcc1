"""Atomic file writes: write to a temporary sibling, then rename, so readers never see half a file, and a crash
right after the rename does not leave an empty one (the file and its folder are synced first).

Many files written together (a generated dataset's images) skip the per-file syncs and are made durable at once by
:func:`sync_all` before the file that marks them complete (their manifest) is written: an fsync per file and per
folder cost most of a generator's time."""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path, *, sync: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically (and durably with
    ``sync``; else :func:`sync_all` must run before anything marks the file complete)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")  # unique across threads and hosts
    try:
        yield tmp
        if sync:
            _sync(tmp)
        os.replace(tmp, path)
        if sync:
            _sync(path.parent)
    except (PermissionError, IsADirectoryError, NotADirectoryError) as error:
        about_tmp = error.filename in (str(tmp), tmp) or (error.filename is None and str(tmp) in str(error))
        if error.errno is None or not about_tmp:
            raise
        raise type(error)(error.errno, os.strerror(error.errno), str(path)) from error  # name the path asked for
    finally:
        tmp.unlink(missing_ok=True)


def _sync(path: Path) -> None:
    if not path.exists():  # the writer wrote nothing there (e.g. a library that writes to a folder of its own)
        return
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_bytes(path: str | Path, data: bytes, *, sync: bool = True) -> Path:
    with atomic_path(path, sync=sync) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def sync_all() -> None:
    """Make every file written so far durable: one ``sync`` for files written with ``sync=False``."""
    os.sync()


def write_json(path: str | Path, payload) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    return Path(path)


def write_report(path: str | Path, payload) -> Path:
    """:func:`write_json` for a report other tools read (``jq``, browsers): strict JSON, an undefined figure (NaN, an
    infinity) written as null."""
    return write_json(path, _defined(payload))


def _defined(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _defined(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_defined(item) for item in value]
    return value
