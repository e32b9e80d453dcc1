"""A tags sidecar: the tags an external tagger (or a person) wrote for the images of a folder, joined to an import.

A CSV with the columns ``image`` (the image's path relative to the imported folder, ``/``-separated) and ``tags``
(separated by ``;``), or a Parquet file with ``image`` and a list column ``tags``. The tags become the manifest's
``tags`` column, which every later stage reads as certain tags (the ``manifest`` tagger). An imported image the
sidecar does not name gets no tags; both kinds of mismatch are reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from mavias.core.datasets.base import ImportResult
from mavias.errors import UserError
from mavias.utils.tables import read_csv_text, read_parquet

SEPARATOR = ";"
EXAMPLES = 3


def _tag_list(value: object) -> list[str]:
    if isinstance(value, str):
        value = value.split(SEPARATOR)
    elif not isinstance(value, Iterable | np.ndarray):
        return []
    return [str(tag).strip() for tag in value if str(tag).strip()]


def _image_name(value: object) -> str:
    return str(value).strip().replace("\\", "/").removeprefix("./")


def read_sidecar(path: str | Path) -> pd.DataFrame:
    """``image`` (relative name), ``tags`` (list): one row per image, the tags of repeated rows merged."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"tags sidecar {path} does not exist; pass a CSV (image,tags) or a Parquet file")
    if path.suffix.lower() == ".csv":
        table = read_csv_text(path, what="tags sidecar")
    elif path.suffix.lower() == ".parquet":
        table = read_parquet(path, what="tags sidecar")
    else:
        raise UserError(f"tags sidecar {path}: unsupported format {path.suffix!r}; use .csv (image,tags with tags "
                        f"separated by '{SEPARATOR}') or .parquet (image and a list column tags)")
    missing = [column for column in ("image", "tags") if column not in table.columns]
    if missing:
        raise UserError(f"tags sidecar {path} lacks the column(s) {', '.join(missing)} (it has: "
                        f"{', '.join(map(str, table.columns))}); it needs image (the path relative to the folder) and "
                        f"tags (separated by '{SEPARATOR}' in a CSV, a list in Parquet)")
    frame = pd.DataFrame({"image": table["image"].map(_image_name), "tags": table["tags"].map(_tag_list)})
    merged = frame.groupby("image", sort=True)["tags"].agg(lambda lists: sorted({t for tags in lists for t in tags}))
    return merged.reset_index()


def _examples(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(repr(n) for n in names[:EXAMPLES]) + (" …" if len(names) > EXAMPLES else "")


def attach_tags(result: ImportResult, sidecar: str | Path, base: str) -> tuple[ImportResult, list[str]]:
    """``result`` with the sidecar's tags as its ``tags`` column, and warnings about names that did not match.

    ``base`` is the imported folder (the uris' common prefix: a resolved local path or an ``s3://`` prefix)."""
    table = read_sidecar(sidecar)
    prefix = base.rstrip("/") + "/"

    def names(uris: pd.Series) -> pd.Series:
        return uris.map(lambda uri: uri[len(prefix):] if uri.startswith(prefix) else uri)

    imported = names(result.manifest["uri"])
    tags = dict(zip(table["image"], table["tags"]))
    matched = imported.isin(tags.keys())
    if not matched.any():
        raise UserError(f"none of the {len(table)} images named in {sidecar} is among the {len(imported)} imported "
                        f"(it names {_examples(table['image'])}; the images are named like {_examples(imported)}): "
                        "the 'image' column holds paths relative to the imported folder")
    warnings = []
    if not matched.all():
        warnings.append(f"{int((~matched).sum())} imported image(s) are not in {sidecar} and get no tags: "
                        f"{_examples(imported[~matched])}")
    unknown = set(tags) - set(imported) - set(names(result.quarantined["uri"]))
    if unknown:
        warnings.append(f"{len(unknown)} image(s) named in {sidecar} are not in the folder: {_examples(unknown)}")
    manifest = result.manifest.assign(tags=[tags.get(name, []) for name in imported])
    info = result.info.model_copy(update={"notes": "; ".join(filter(None, [result.info.notes,
                                                                            f"tags from {sidecar}"]))})
    return ImportResult(manifest, result.quarantined, info), warnings
