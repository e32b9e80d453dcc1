"""ImageFolder layout: ``ROOT/<class>/<image>``, or ``ROOT/{train,val,test}/<class>/<image>`` with ``split_from``.

The layout is parsed from relative names, so the same code serves local folders and S3 prefixes (:mod:`.s3`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pandas as pd

from mavias.core.datasets.base import (
    IMAGE_SUFFIXES,
    ImportResult,
    build_import,
    is_image_name,
    require_path,
    stratified_split,
)
from mavias.core.manifest import SPLITS, DatasetInfo
from mavias.errors import UserError
from mavias.utils.disk import files_under


@dataclass(frozen=True)
class SplitOptions:
    """``split_from``: take the split from train/val/test sub-folders; else a seeded stratified split."""

    split_from: bool = False
    seed: int = 0
    val: float = 0.1
    test: float = 0.1


def layout_rows(names: Iterable[str], options: SplitOptions) -> pd.DataFrame:
    """Candidate rows (``name``, ``label``, ``split``, ``problem``) from POSIX paths relative to the root."""
    rows = []
    depth = 3 if options.split_from else 2
    for name in sorted(n for n in names if is_image_name(n)):
        parts = PurePosixPath(name).parts
        if len(parts) < depth:
            where = "<split>/<class>/" if options.split_from else "<class>/"
            rows.append((name, "", "", f"not inside a {where} folder: put each class's images in ROOT/{where}"))
        elif options.split_from and parts[0] not in SPLITS:
            rows.append((name, "", "", f"split folder {parts[0]!r} is not one of {', '.join(SPLITS)}"))
        elif options.split_from:
            rows.append((name, parts[1], parts[0], None))
        else:
            rows.append((name, parts[0], "", None))
    frame = pd.DataFrame(rows, columns=["name", "label", "split", "problem"])
    if not options.split_from:
        usable = frame["problem"].isna()
        frame.loc[usable, "split"] = stratified_split(
            frame.loc[usable, "label"], seed=options.seed, val=options.val, test=options.test
        )
    if options.split_from and not (frame["split"] == "train").any():
        raise UserError("--split-from found no train/<class>/ images; drop --split-from for a class-folder layout")
    if options.split_from and not (frame["split"] == "val").any():
        raise UserError("--split-from found no val/<class>/ images: training selects its checkpoint and finds "
                        "shortcuts on a validation split", hint="add ROOT/val/<class>/ folders, or drop --split-from "
                        "to hold back a stratified share of the images")
    return frame


def import_imagefolder(root: str | Path, options: SplitOptions = SplitOptions(), *, progress: bool = True) -> ImportResult:
    root = require_path(Path(root), "one sub-folder per class").resolve()
    names = [p.relative_to(root).as_posix() for p in files_under(root)]
    rows = layout_rows(names, options)
    if rows.empty:
        raise UserError(f"no images found in {root}: a class folder holds one sub-folder per class with its images "
                        f"inside ({root.name}/<class>/<image>; {', '.join(sorted(IMAGE_SUFFIXES))} files)")
    rows["uri"] = [str(root / name) for name in rows["name"]]
    info = DatasetInfo(name=root.name, source=str(root), notes=_split_note(options))
    return build_import(rows.drop(columns="name"), info, progress=progress)


def _split_note(options: SplitOptions) -> str:
    if options.split_from:
        return "splits from the train/val/test sub-folders"
    return f"stratified split, seed {options.seed}, val {options.val}, test {options.test}"
