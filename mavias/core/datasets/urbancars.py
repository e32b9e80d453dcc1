"""UrbanCars: ``bg-<r>_co_occur_obj-<r>/<split>/obj-<o>_bg-<b>_co_occur_obj-<c>/NNN.jpg``.

The published release has the training split under ``bg-0.95_co_occur_obj-0.95/`` and val/test under
``bg-0.5_co_occur_obj-0.5/``. Label = object type; ``attr_bg`` / ``attr_co_occur_obj`` = the folder's background and
co-occurring object; ``attr_bg_aligned`` / ``attr_coobj_aligned`` ("1"/"0") feed the UrbanCars gap metrics.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from mavias.core.datasets.base import ImportResult, build_import, is_image_name, require_path
from mavias.core.manifest import SPLITS, DatasetInfo
from mavias.errors import UserError
from mavias.utils.disk import files_under

GROUP_FOLDER = re.compile(r"^obj-(?P<obj>urban|country)_bg-(?P<bg>urban|country)_co_occur_obj-(?P<co>urban|country)$")
RATIO_FOLDER = re.compile(r"^bg-[0-9.]+_co_occur_obj-[0-9.]+$")


def import_urbancars(root: str | Path, *, progress: bool = True) -> ImportResult:
    root = require_path(Path(root), "the bg-…_co_occur_obj-… folders").resolve()
    rows, sources = [], {}
    for ratio_dir in sorted(d for d in root.iterdir() if d.is_dir() and RATIO_FOLDER.match(d.name)):
        for split_dir in sorted(d for d in ratio_dir.iterdir() if d.is_dir() and d.name in SPLITS):
            if split_dir.name in sources:
                raise UserError(f"split {split_dir.name!r} found under both {sources[split_dir.name]} and {ratio_dir.name}; "
                                "keep one correlation level per split (as published)")
            sources[split_dir.name] = ratio_dir.name
            rows += _split_rows(split_dir)
    if not rows:
        raise UserError(f"{root} holds no bg-<r>_co_occur_obj-<r>/<split>/ folders; pass the UrbanCars root folder")
    info = DatasetInfo(name="urbancars", protocol="urbancars", group_attrs=["attr_bg_aligned", "attr_coobj_aligned"],
                       source=str(root), notes=", ".join(f"{s} from {r}" for s, r in sorted(sources.items())))
    return build_import(pd.DataFrame(rows), info, progress=progress)


def _split_rows(split_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(p for p in files_under(split_dir) if is_image_name(p.name)):
        match = GROUP_FOLDER.match(path.parent.name) if path.parent.parent == split_dir else None
        if match is None:
            rows.append({"uri": str(path), "label": "", "split": split_dir.name,
                         "problem": "not inside an obj-<o>_bg-<b>_co_occur_obj-<c> folder"})
            continue
        obj, bg, co = match["obj"], match["bg"], match["co"]
        rows.append({"uri": str(path), "label": obj, "split": split_dir.name, "attr_bg": bg, "attr_co_occur_obj": co,
                     "attr_bg_aligned": str(int(bg == obj)), "attr_coobj_aligned": str(int(co == obj)), "problem": None})
    return rows
