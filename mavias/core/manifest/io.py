"""Reading, writing and validating manifests."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from mavias.core.manifest.info import INFO_NAME, STANDARD_SPLITS, read_dataset_info
from mavias.errors import UserError
from mavias.utils.atomic import atomic_path
from mavias.utils.tables import read_parquet_or_csv

SPLITS = STANDARD_SPLITS
REQUIRED_COLUMNS = ("sample_id", "uri", "label", "split")
ATTR_PREFIX = "attr_"


MANIFEST_NAME = "manifest.parquet"  # the file name of a folder's manifest (an import's, a partition's)


class ManifestError(UserError, ValueError):
    """A manifest that breaks the contract; the message lists every problem found."""


def content_sample_id(data: bytes) -> str:
    """Stable sample id from the content: the first 16 hex digits of the sha256 of the bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


def resolve_uri(manifest_dir: Path, uri: str) -> Path:
    """Local path of a manifest ``uri``; relative uris are relative to the manifest's folder."""
    if uri.startswith("s3://"):
        raise ManifestError(f"{uri}: s3:// uris must be fetched to a local folder first (mavias.ops.nightly.pull.pull_partition)")
    path = Path(uri)
    return path if path.is_absolute() else manifest_dir / path


def read_manifest_table(path: Path) -> pd.DataFrame:
    df = read_parquet_or_csv(path, what="manifest", error=ManifestError)
    if path.suffix == ".csv" and "tags" in df.columns:
        sidecar_style = df["tags"].str.contains(";", regex=False) & ~df["tags"].str.contains("|", regex=False)
        if sidecar_style.any():
            raise ManifestError(f"{path}: {int(sidecar_style.sum())} row(s) separate their tags with ';' (e.g. "
                                f"{df.loc[sidecar_style, 'tags'].iloc[0]!r}): a manifest CSV separates them with '|' "
                                "(';' is the separator of an import's tags sidecar)")
        df["tags"] = df["tags"].map(lambda s: [t for t in s.split("|") if t])
    return df


def validate_manifest(
    df: pd.DataFrame, *, manifest_dir: Path | None = None, eval_splits: Sequence[str] = ()
) -> pd.DataFrame:
    """Check the contract and return a normalised copy; raise :class:`ManifestError` listing all problems.

    With ``manifest_dir`` given, every local file must also exist. ``eval_splits`` are the named evaluation splits a
    ``dataset.json`` declares (e.g. ImageNet-9's ``mixed_rand``); they are allowed besides train/val/test.
    """
    allowed = (*SPLITS, *eval_splits)
    problems: list[str] = []
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ManifestError(f"missing required column(s): {', '.join(missing)}",
                            hint="a manifest has the columns sample_id, uri, label, split; `mavias data import` writes "
                                 "one from a folder of images")
    if df.empty:
        raise ManifestError("manifest has no rows")
    df = df.copy()
    blank = {col: df[col].isna() | (df[col].astype(str).str.strip() == "") for col in REQUIRED_COLUMNS}
    for col in REQUIRED_COLUMNS:
        df[col] = df[col].astype(str)
        if blank[col].any():
            problems.append(f"{int(blank[col].sum())} row(s) with an empty {col!r}")
    bad_split = ~df["split"].isin(allowed)
    if bad_split.any():
        values = sorted(df.loc[bad_split, "split"].unique())[:5]
        problems.append(
            f"{int(bad_split.sum())} row(s) with an unknown split {values} (allowed: {', '.join(allowed)}; "
            f"declare further evaluation splits in {INFO_NAME})"
        )
    problems += _label_problems(df.loc[~blank["label"], "label"])
    dup = df["sample_id"].duplicated(keep=False)
    if dup.any():
        ids = sorted(df.loc[dup, "sample_id"].unique())[:5]
        problems.append(f"{int(dup.sum())} row(s) share a sample_id, e.g. {ids}")
    if "tags" in df.columns:
        problems += _tag_problems(df["tags"])
        df["tags"] = df["tags"].map(_normalise_tags)
    if manifest_dir is not None:
        local = ~df["uri"].str.startswith("s3://")
        absent = [u for u in df.loc[local, "uri"] if not resolve_uri(manifest_dir, u).exists()]
        if absent:
            problems.append(f"{len(absent)} file(s) not found, e.g. {absent[:3]} (relative to {manifest_dir})")
    if problems:
        raise ManifestError("invalid manifest:\n  - " + "\n  - ".join(problems))
    return df.reset_index(drop=True)


def _label_problems(labels: pd.Series) -> list[str]:
    """Labels that would split one class in two: spaces around a name ('cat '), or one name in two cases."""
    problems, named = [], labels.unique()
    padded = sorted({label for label in named if label != label.strip()})
    if padded:
        problems.append(f"label(s) {', '.join(map(repr, padded[:5]))} have spaces at the start or end: rename them "
                        "(a folder name, or the label column) without the spaces")
    names = pd.Series(sorted(named))
    folded = names.groupby(names.str.strip().str.casefold()).agg(list)
    if clashes := [group for group in folded if len(group) > 1]:
        problems.append(f"label(s) {', '.join(' and '.join(map(repr, group)) for group in clashes[:3])} differ only "
                        "in case or spaces: give each class one spelling")
    return problems


def _tag_problems(tags: pd.Series) -> list[str]:
    """Tags written as text instead of a list per image (each letter would become a tag; a blank is no tags), or a
    tag with a comma."""
    text = tags[tags.map(lambda value: isinstance(value, str) and bool(value.strip()))]
    if not text.empty:
        return [f"{len(text)} row(s) hold their tags as text (e.g. {text.iloc[0]!r}), not as a list of tags: write a "
                "list per image (in a CSV manifest, tags separated by '|')"]
    # a bias prompt joins an image's tags with ", ": a comma inside one would read as two tags
    with_comma = sorted({str(tag) for value in tags if _is_list(value) for tag in value if "," in str(tag)})
    if with_comma:
        return [f"{len(with_comma)} tag(s) hold a comma (e.g. {with_comma[0]!r}): give each thing its own tag, or "
                "write the tag without the comma"]
    return []


def _is_list(value) -> bool:
    return not isinstance(value, str) and hasattr(value, "__iter__")


def _normalise_tags(value) -> list[str]:
    if value is None or (isinstance(value, float) and pd.isna(value)) or (isinstance(value, str) and not value.strip()):
        return []
    return sorted({str(t).strip().lower() for t in value if str(t).strip()})


def load_manifest(path: str | Path, *, check_files: bool = True) -> pd.DataFrame:
    """Load and validate a manifest (Parquet or CSV with ``|``-separated tags)."""
    path = Path(path)
    if path.is_dir() and (path / MANIFEST_NAME).is_file():
        raise ManifestError(f"{path} is a folder; the manifest is {path / MANIFEST_NAME}",
                            hint=f"pass {path / MANIFEST_NAME}")
    df = read_manifest_table(path)
    info = read_dataset_info(path)
    try:
        return validate_manifest(
            df, manifest_dir=path.parent if check_files else None, eval_splits=info.eval_splits if info else ()
        )
    except ManifestError as err:
        raise ManifestError(f"{path}: {err}") from None


def save_manifest(df: pd.DataFrame, path: str | Path, *, eval_splits: Sequence[str] = ()) -> Path:
    """Validate (without file checks) and write atomically as Parquet."""
    path = Path(path)
    df = validate_manifest(df, eval_splits=eval_splits)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path
