"""Waterbirds (``waterbird_complete95_forest2water2/``): species folders + ``metadata.csv``.

``metadata.csv``: ``img_id,img_filename,y,split,place,place_filename``; y 0 landbird / 1 waterbird, place 0 land /
1 water, split 0/1/2 = train/val/test. The place becomes ``attr_place`` (true groups = (label, place)).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mavias.core.datasets.base import ImportResult, build_import, require_columns, require_path
from mavias.core.manifest import DatasetInfo
from mavias.utils.tables import read_csv_text

LABELS = {"0": "landbird", "1": "waterbird"}
PLACES = {"0": "land", "1": "water"}
SPLIT_CODES = {"0": "train", "1": "val", "2": "test"}


def coded(values: pd.Series, codes: dict[str, str], column: str) -> tuple[pd.Series, pd.Series]:
    """(decoded values, problem per row) of a coded metadata column."""
    decoded = values.astype(str).str.strip().map(codes)
    problem = pd.Series(None, index=values.index, dtype=object)
    problem[decoded.isna()] = [f"metadata: {column}={v!r} is not one of {sorted(codes)}" for v in values[decoded.isna()]]
    return decoded.fillna(""), problem


def first_problem(*problems: pd.Series) -> pd.Series:
    out = problems[0].copy()
    for p in problems[1:]:
        out = out.where(out.notna(), p)
    return out


def import_waterbirds(root: str | Path, *, progress: bool = True) -> ImportResult:
    root = Path(root).resolve()
    metadata_path = require_path(root / "metadata.csv", "Waterbirds' metadata.csv")
    meta = read_csv_text(metadata_path, what="Waterbirds' metadata")
    require_columns(meta, ["img_filename", "y", "split", "place"], metadata_path)
    label, bad_label = coded(meta["y"], LABELS, "y")
    split, bad_split = coded(meta["split"], SPLIT_CODES, "split")
    place, bad_place = coded(meta["place"], PLACES, "place")
    rows = pd.DataFrame({
        "uri": [str(root / name) for name in meta["img_filename"]],
        "label": label, "split": split, "attr_place": place,
        "problem": first_problem(bad_label, bad_split, bad_place),
    })
    info = DatasetInfo(name="waterbirds", protocol="closed_set", group_attrs=["attr_place"], source=str(root))
    return build_import(rows, info, progress=progress)
