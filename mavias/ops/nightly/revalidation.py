"""A validated partition validated again (forced, or its marker deleted): it is pulled into a staged copy that
replaces the validated copy only once it passed and is pinned, so a failure leaves the validated copy training.

The staged copy starts as hard links of the validated one (no bytes copied; a pull replaces a file instead of
writing into it), so only the files that changed are downloaded. The replacement is two renames; a night cut off
between them is finished by the next (:func:`recover`).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from mavias.ops.nightly.pull import PULL_JOURNAL, VALIDATED_ETAGS

log = logging.getLogger(__name__)

ASIDE_PREFIX = "_replaced-"  # no partition name starts with "_"


def _aside(staging: Path) -> Path:
    return staging.with_name(f"{ASIDE_PREFIX}{staging.name}")


def stage(folder: Path, staging: Path) -> Path:
    """``staging`` holding ``folder``'s pulled files (a staged copy left by a cut-off attempt is resumed)."""
    if staging.exists():
        return staging
    for path in folder.rglob("*"):
        if path.is_file() and path.name not in (PULL_JOURNAL, VALIDATED_ETAGS):
            target = staging / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:  # a volume without hard links: copy
                shutil.copy2(path, target)
    staging.mkdir(parents=True, exist_ok=True)
    return staging


def adopt(folder: Path, staging: Path) -> None:
    """Put the staged copy (validated and pinned) in the validated copy's place."""
    aside = _aside(staging)
    shutil.rmtree(aside, ignore_errors=True)
    if folder.exists():
        folder.rename(aside)
    staging.rename(folder)
    shutil.rmtree(aside, ignore_errors=True)


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def recover(folder: Path, staging: Path) -> None:
    """Finish a replacement cut off between its renames (the staged copy was pinned first), or clear what it left."""
    aside = _aside(staging)
    if not aside.exists():
        return
    if not folder.exists():
        log.warning("finishing the replacement of %s by its validated-again copy, cut off last time", folder)
        (staging if staging.exists() else aside).rename(folder)
    shutil.rmtree(aside, ignore_errors=True)
