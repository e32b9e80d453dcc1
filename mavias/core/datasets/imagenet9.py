"""ImageNet-9 backgrounds challenge: ``bg_challenge/<variant>/val/<class>/<image>``.

Every variant becomes a named evaluation split (``original``, ``mixed_same``, ``mixed_rand``, …). The IN-9L
training set is rebuilt from ImageNet-1k and comes in as an ImageFolder with train/val sub-folders (``train_root``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mavias.core.datasets.base import ImportResult, build_import, is_image_name, require_path
from mavias.core.datasets.imagefolder import SplitOptions, layout_rows
from mavias.core.manifest import DatasetInfo
from mavias.errors import UserError
from mavias.utils.disk import files_under

VARIANTS = ("original", "mixed_same", "mixed_rand", "mixed_next", "no_fg", "only_bg_b", "only_bg_t", "only_fg")


def _challenge_dir(root: Path) -> Path:
    return root / "bg_challenge" if (root / "bg_challenge").is_dir() else root


def import_imagenet9(root: str | Path, *, train_root: str | Path | None = None, progress: bool = True) -> ImportResult:
    challenge = _challenge_dir(require_path(Path(root), "bg_challenge/").resolve())
    variants = [v for v in VARIANTS if (challenge / v / "val").is_dir()]
    if not variants:
        raise UserError(f"{challenge} holds none of the variant folders {', '.join(VARIANTS)} (each with val/<class>/)")
    frames = []
    for variant in variants:
        base = challenge / variant / "val"
        names = [p.relative_to(base).as_posix() for p in files_under(base) if is_image_name(p.name)]
        rows = layout_rows(names, SplitOptions(val=0.0, test=0.0))
        frames.append(rows.assign(split=variant, uri=[str(base / n) for n in rows["name"]]))
    if train_root is not None:
        train_base = require_path(Path(train_root), "IN-9L train/<class>/ and val/<class>/").resolve()
        names = [p.relative_to(train_base).as_posix() for p in files_under(train_base)]
        rows = layout_rows(names, SplitOptions(split_from=True))
        frames.append(rows.assign(uri=[str(train_base / n) for n in rows["name"]]))
    info = DatasetInfo(name="imagenet9", protocol="imagenet9", eval_splits=list(variants),
                       source=str(challenge) + (f" + {train_root}" if train_root else ""))
    return build_import(pd.concat(frames, ignore_index=True).drop(columns="name"), info, progress=progress)
