"""CelebA: ``img_align_celeba/``, ``list_attr_celeba.{txt,csv}``, ``list_eval_partition.{txt,csv}``.

Target ``Blond_Hair`` (labels ``blond`` / ``not_blond``), ground-truth bias ``Male`` → ``attr_male`` ("1"/"0").
The txt attribute file has the image count on line 1, the 40 names on line 2, then ``file v1 … v40`` in {-1, 1};
the csv variants have the header ``image_id,…`` (and ``image_id,partition``).

Biased-CelebA (``biased=True``): in the training split, per class, the bias-aligned images (blond ∧ female,
not blond ∧ male) are all kept and the bias-conflicting ones are subsampled (seeded) so that aligned images make up
``bias_ratio`` (0.9) of the class; classes already at or above the ratio are kept whole; val/test stay unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from mavias.core.datasets.base import ImportResult, build_import, require_columns, require_path
from mavias.core.datasets.waterbirds import SPLIT_CODES, coded, first_problem
from mavias.core.manifest import DatasetInfo
from mavias.errors import UserError
from mavias.utils.tables import read_csv_text
from mavias.utils.userfiles import read_text

TARGET, BIAS = "Blond_Hair", "Male"
LABELS = {"1": "blond", "-1": "not_blond"}
FLAGS = {"1": "1", "-1": "0"}
ALIGNED = {"blond": "0", "not_blond": "1"}  # the bias-aligned attr_male per class


def _first_existing(root: Path, stem: str) -> Path:
    for suffix in (".txt", ".csv"):
        if (root / f"{stem}{suffix}").exists():
            return root / f"{stem}{suffix}"
    raise UserError(f"neither {stem}.txt nor {stem}.csv found in {root}; pass the CelebA root folder")


def read_attributes(path: Path) -> pd.DataFrame:
    """Attribute table indexed by image file name, values as strings "1"/"-1"."""
    if path.suffix == ".csv":
        table = read_csv_text(path, what="CelebA attributes")
        require_columns(table, ["image_id"], path)
        return table.set_index("image_id")
    lines = read_text(path, what="CelebA attributes").splitlines()
    if len(lines) < 2:
        raise UserError(f"{path} is too short: line 1 must hold the image count, line 2 the attribute names")
    names = lines[1].split()
    rows = [line.split() for line in lines[2:] if line.strip()]
    bad = [r[0] for r in rows if len(r) != len(names) + 1]
    if bad:
        raise UserError(f"{path}: {len(bad)} line(s) do not have {len(names)} values, e.g. {bad[:3]}")
    return pd.DataFrame([r[1:] for r in rows], index=[r[0] for r in rows], columns=names)


def read_partition(path: Path) -> pd.Series:
    if path.suffix == ".csv":
        table = read_csv_text(path, what="CelebA partition")
        require_columns(table, ["image_id", "partition"], path)
        return table.set_index("image_id")["partition"]
    pairs = [line.split() for line in read_text(path, what="CelebA partition").splitlines() if line.strip()]
    return pd.Series({p[0]: p[1] if len(p) > 1 else "" for p in pairs})


def _image_dir(root: Path) -> Path:
    images = require_path(root / "img_align_celeba", "img_align_celeba/")
    nested = images / "img_align_celeba"  # the Kaggle archive nests the folder once more
    return nested if nested.is_dir() else images


def import_celeba(root: str | Path, *, biased: bool = False, bias_ratio: float = 0.9, seed: int = 0,
                  progress: bool = True) -> ImportResult:
    root = Path(root).resolve()
    attrs_path = _first_existing(root, "list_attr_celeba")
    attrs = read_attributes(attrs_path)
    require_columns(attrs, [TARGET, BIAS], attrs_path)
    partition = read_partition(_first_existing(root, "list_eval_partition")).reindex(attrs.index)
    images = _image_dir(root)
    label, bad_label = coded(attrs[TARGET], LABELS, TARGET)
    male, bad_male = coded(attrs[BIAS], FLAGS, BIAS)
    split, bad_split = coded(partition.fillna(""), SPLIT_CODES, "partition")
    bad_split[partition.isna()] = "not listed in list_eval_partition"
    rows = pd.DataFrame({"uri": [str(images / name) for name in attrs.index], "label": label, "split": split,
                         "attr_male": male, "problem": first_problem(bad_label, bad_male, bad_split)}).reset_index(drop=True)
    notes = ""
    if biased:
        rows = biased_subset(rows, bias_ratio, seed)
        notes = f"Biased-CelebA: training conflicting samples subsampled to aligned ratio {bias_ratio} per class, seed {seed}"
    info = DatasetInfo(name="biased-celeba" if biased else "celeba", protocol="celeba", group_attrs=["attr_male"],
                       source=str(root), notes=notes)
    return build_import(rows, info, progress=progress)


def biased_subset(rows: pd.DataFrame, ratio: float, seed: int) -> pd.DataFrame:
    """Drop training bias-conflicting rows until aligned rows are ``ratio`` of each class (module docstring)."""
    if not 0.5 <= ratio < 1:
        raise UserError(f"--bias-ratio {ratio} must lie in [0.5, 1)")
    rng = np.random.default_rng(seed)
    train = (rows["split"] == "train") & rows["problem"].isna()
    drop: list[int] = []
    for label, aligned_value in ALIGNED.items():
        in_class = train & (rows["label"] == label)
        aligned = in_class & (rows["attr_male"] == aligned_value)
        conflicting = np.flatnonzero((in_class & ~aligned).to_numpy())
        keep = min(len(conflicting), int(aligned.sum() * (1 - ratio) / ratio))
        drop += list(rng.permutation(conflicting)[keep:])
    return rows.drop(index=drop).reset_index(drop=True)
