"""The importers' shared interface: candidate rows in, a validated manifest + quarantined rows out.

Every importer turns a dataset layout into *candidate* rows (``uri``, ``label``, ``split``, ``attr_*``, and an
optional ``problem`` saying why a row cannot be used before any file is read). :func:`build_import` then reads every
file once in a thread pool, derives the content ``sample_id`` (:func:`mavias.core.manifest.content_sample_id`), checks that
it decodes, and splits the rows into the manifest and the quarantine. Nothing is written into the data folder: the
manifest's uris point at the original files and :func:`write_import` writes into a separate output folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import numpy as np
import pandas as pd

from mavias.core.manifest import MANIFEST_NAME, DatasetInfo, content_sample_id, save_manifest, write_dataset_info
from mavias.core.manifest.quarantine import QUARANTINE_COLUMNS, image_problem, is_machine_read_fault, size_problem
from mavias.errors import UserError
from mavias.utils.csvfile import write_csv
from mavias.utils.progress import progress_bar

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
QUARANTINE_NAME = "quarantine.csv"
ReadBytes = Callable[[str], bytes]


@dataclass
class ImportResult:
    manifest: pd.DataFrame
    quarantined: pd.DataFrame  # QUARANTINE_COLUMNS; sample_id is empty when the file could not be read
    info: DatasetInfo

    def summary(self) -> str:
        counts = self.manifest["split"].value_counts().sort_index()
        per_split = ", ".join(f"{split} {n}" for split, n in counts.items())
        return f"{len(self.manifest)} images ({per_split}), {len(self.quarantined)} quarantined"


class FileTooLarge(Exception):
    """A file larger than any one image: not read (a mistake of the layout, or not an image)."""


def check_image_bytes(size: int) -> None:
    problem = size_problem(size)
    if problem:
        raise FileTooLarge(problem)


def read_local(uri: str) -> bytes:
    path = Path(uri)
    check_image_bytes(path.stat().st_size)
    return path.read_bytes()


def is_image_name(name: str) -> bool:
    return Path(name).suffix.lower() in IMAGE_SUFFIXES


def require_columns(table: pd.DataFrame, columns: Iterable[str], source: Path | str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise UserError(
            f"{source} lacks the column(s) {', '.join(missing)} (it has: {', '.join(map(str, table.columns))}); "
            "pass the file as published with the dataset"
        )


def require_path(path: Path, what: str) -> Path:
    if not path.exists():
        raise UserError(f"{path} not found: point the importer at the folder that holds {what}")
    return path


def stratified_split(labels: pd.Series, *, seed: int, val: float, test: float) -> pd.Series:
    """Seeded per-class split into train/val/test; every class keeps at least one training image, and a class of at
    least 2 images (3 with a test split) holds at least one back for validation (and one for the test) however
    small its share rounds."""
    if val < 0 or test < 0 or val + test >= 1:
        raise UserError(f"--val ({val}) and --test ({test}) must be fractions with val + test < 1")
    rng = np.random.default_rng(seed)
    split = pd.Series("train", index=labels.index, dtype=object)
    for _, index in labels.groupby(labels, sort=True).groups.items():
        order = rng.permutation(np.asarray(sorted(index)))
        n_test = min(max(int(round(len(order) * test)), int(test > 0 and len(order) >= 3)), len(order) - 1)
        n_val = min(max(int(round(len(order) * val)), int(val > 0)), len(order) - 1 - n_test)
        split.loc[order[:n_test]] = "test"
        split.loc[order[n_test : n_test + n_val]] = "val"
    return split


def _inspect(uri: str, read: ReadBytes) -> tuple[str, str | None]:
    """(sample_id, problem) of one file."""
    try:
        data = read(uri)
    except FileNotFoundError:
        return "", "file not found"
    except FileTooLarge as err:
        return "", str(err)
    except OSError as err:
        if is_machine_read_fault(err):
            raise
        return "", f"cannot read: {type(err).__name__}: {err}"
    return content_sample_id(data), image_problem(BytesIO(data))


def build_import(
    candidates: pd.DataFrame, info: DatasetInfo, *, read: ReadBytes = read_local, workers: int = 8, progress: bool = True
) -> ImportResult:
    """Hash and decode every candidate file (thread pool); quarantine the unusable rows with their reason."""
    if candidates.empty:
        raise UserError(f"no images found for {info.name} in {info.source} (images are "
                        f"{', '.join(sorted(IMAGE_SUFFIXES))} files); check the path and the dataset's layout")
    rows = candidates.sort_values("uri", kind="stable").reset_index(drop=True)
    problems = rows["problem"] if "problem" in rows.columns else pd.Series([None] * len(rows))
    problems = problems.where(problems.notna() & (problems != ""), None)
    todo = rows.index[problems.isna()]
    uris = list(rows.loc[todo, "uri"])
    with ThreadPoolExecutor(max_workers=workers) as pool:
        inspected = list(progress_bar(pool.map(lambda uri: _inspect(uri, read), uris), total=len(uris),
                                      desc=f"importing {info.name}", unit="img", enabled=progress))
    rows["sample_id"] = ""
    rows.loc[todo, "sample_id"] = [sid for sid, _ in inspected]
    problems.loc[todo] = [problem for _, problem in inspected]
    first_uri = rows[problems.isna()].drop_duplicates("sample_id").set_index("sample_id")["uri"]
    duplicate = problems.isna() & rows["sample_id"].duplicated()
    problems[duplicate] = [f"same content as {first_uri[sid]}" for sid in rows.loc[duplicate, "sample_id"]]
    bad = problems.notna()
    quarantined = rows.loc[bad, ["sample_id", "uri"]].assign(reason=problems[bad]).reset_index(drop=True)
    manifest = rows.loc[~bad].drop(columns=["problem"], errors="ignore").reset_index(drop=True)
    columns = ["sample_id", "uri", "label", "split", *sorted(c for c in manifest.columns if c.startswith("attr_"))]
    return ImportResult(manifest[columns], quarantined[QUARANTINE_COLUMNS], info)


def check_out_dir(out: Path, data_root: Path | None) -> None:
    """Refuse an output folder inside the data folder: importers never write there."""
    if data_root is None:
        return
    out, root = out.resolve(), data_root.resolve()
    if out == root or root in out.parents:
        raise UserError(f"--out {out} lies inside the data folder {root}; choose an output folder outside it")


def write_import(result: ImportResult, out: str | Path) -> Path:
    """``out/manifest.parquet``, ``out/dataset.json`` and ``out/quarantine.csv`` (header only when nothing failed)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(result.quarantined, out / QUARANTINE_NAME)
    if result.manifest.empty:
        reasons = result.quarantined["reason"].value_counts() if len(result.quarantined) else None
        common = "" if reasons is None else f" (most often: {reasons.index[0]}, {reasons.iloc[0]} of them)"
        raise UserError(f"every image was quarantined{common}; see each one's reason in {out / QUARANTINE_NAME}")
    manifest_path = save_manifest(result.manifest, out / MANIFEST_NAME, eval_splits=result.info.eval_splits)
    write_dataset_info(result.info, manifest_path)
    return manifest_path
