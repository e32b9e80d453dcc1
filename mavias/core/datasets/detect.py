"""Any path a user points at, as an import: an ImageFolder (with or without train/ val/ test/ sub-folders), a
published dataset layout recognised by its files, or a manifest (its uris made absolute, so the import can live in
another folder)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mavias.core.datasets.base import ImportResult
from mavias.core.datasets.celeba import import_celeba
from mavias.core.datasets.imagefolder import SplitOptions, import_imagefolder
from mavias.core.datasets.urbancars import RATIO_FOLDER, import_urbancars
from mavias.core.datasets.waterbirds import import_waterbirds
from mavias.core.manifest import SPLITS, DatasetInfo, load_manifest, read_dataset_info, resolve_uri
from mavias.core.manifest.quarantine import QUARANTINE_COLUMNS
from mavias.errors import UserError

LAYOUTS = ("auto", "imagefolder", "waterbirds", "celeba", "urbancars", "manifest")
MANIFEST_SUFFIXES = (".parquet", ".csv")


def detect_layout(path: Path) -> str:
    """The layout of ``path``, recognised by the files each published dataset ships with."""
    if path.is_file():
        if path.suffix.lower() in MANIFEST_SUFFIXES:
            return "manifest"
        raise UserError(f"{path} is a file, not a manifest (.parquet or .csv) nor a folder of images")
    if not path.is_dir():
        raise UserError(f"{path} does not exist; pass a folder of images (one sub-folder per class) or a manifest")
    folders = {child.name for child in path.iterdir() if child.is_dir()}
    if (path / "metadata.csv").is_file():
        return "waterbirds"
    if "img_align_celeba" in folders:
        return "celeba"
    if any(RATIO_FOLDER.match(name) for name in folders):
        return "urbancars"
    if "bg_challenge" in folders or {"mixed_same", "mixed_rand"} <= folders:
        raise UserError("an ImageNet-9 backgrounds challenge needs its IN-9L training images: mavias data import "
                        f"imagenet9 {path} --train IN9L_FOLDER --out DATA, then pass DATA/manifest.parquet")
    return "imagefolder"


def has_split_folders(root: Path) -> bool:
    """``root/train/<class>/...`` (and optionally val/, test/) rather than ``root/<class>/...``."""
    folders = {child.name for child in root.iterdir() if child.is_dir()}
    return "train" in folders and folders <= set(SPLITS)


def import_manifest(path: Path) -> ImportResult:
    """A manifest as an import: its rows with absolute uris, its ``dataset.json`` (or a generic one)."""
    manifest = load_manifest(path, check_files=False)
    base = path.parent.resolve()
    manifest["uri"] = [uri if uri.startswith("s3://") else str(resolve_uri(base, uri).resolve())
                       for uri in manifest["uri"]]
    info = read_dataset_info(path) or DatasetInfo(name=base.name, source=str(path.resolve()))
    return ImportResult(manifest, pd.DataFrame(columns=QUARANTINE_COLUMNS), info)


def import_path(path: str | Path, layout: str = "auto", *, progress: bool = True) -> tuple[ImportResult, str]:
    """The import of ``path`` in ``layout`` (``auto``: detected) and the folder its uris are relative to (where a
    tags sidecar's names start)."""
    path = Path(path)
    if layout not in LAYOUTS:
        raise UserError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    layout = detect_layout(path) if layout == "auto" else layout
    base = str((path.parent if layout == "manifest" else path).resolve())
    if layout == "manifest":
        return import_manifest(path), base
    if layout == "waterbirds":
        return import_waterbirds(path, progress=progress), base
    if layout == "celeba":
        return import_celeba(path, progress=progress), base
    if layout == "urbancars":
        return import_urbancars(path, progress=progress), base
    return import_imagefolder(path, SplitOptions(split_from=has_split_folders(path)), progress=progress), base
