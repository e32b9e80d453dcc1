"""Quarantine images that fail to decode: listed with a reason, never a crash, never silently dropped."""

from __future__ import annotations

import errno
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import IO

import pandas as pd
from PIL import Image

from mavias.core.manifest.io import resolve_uri
from mavias.utils.csvfile import read_csv, write_csv

QUARANTINE_COLUMNS = ["sample_id", "uri", "reason"]
MACHINE_READ_ERRNOS = frozenset({errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
MAX_IMAGE_PIXELS = 64_000_000  # one image (an 8000 x 8000 photo): beyond it, decoding alone would take GBs
MAX_IMAGE_BYTES = 256 * 2**20  # one image file; a larger one is quarantined unread (not downloaded, not decoded)


def size_problem(size: int) -> str | None:
    """Why a file of ``size`` bytes is not read as an image, or ``None`` when its size is fine."""
    if size > MAX_IMAGE_BYTES:
        return f"too large: {size:,} bytes, more than the {MAX_IMAGE_BYTES:,} of any one image"
    return None


def decode_problem(path: Path) -> str | None:
    """Why the image at ``path`` cannot be used, or ``None`` when it decodes."""
    if not path.exists():
        return "file not found"
    return size_problem(path.stat().st_size) or image_problem(path)


def image_problem(source: Path | IO[bytes]) -> str | None:
    """Why the image (a path or a binary file object) cannot be decoded, or ``None`` when it decodes. Its size is
    read from the header and checked before a pixel is decoded; a fault of the machine (:func:`is_machine_read_fault`)
    is raised, never blamed on the image."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the check below says it, as a reason
            img = Image.open(source)
        with img:
            if img.width * img.height > MAX_IMAGE_PIXELS:
                return (f"too large: {img.width}x{img.height} pixels, more than {MAX_IMAGE_PIXELS:,} (a "
                        "decompression bomb, or a photo to resize before importing)")
            img.load()
            if img.width == 0 or img.height == 0:
                return "empty image"
    except MemoryError:
        raise
    except Image.DecompressionBombError as err:  # beyond the limit a process set for PIL (the server's is lower)
        return f"too large: {err}"
    except Exception as err:  # PIL raises many unrelated types for broken files
        if is_machine_read_fault(err):
            raise
        return f"cannot decode: {type(err).__name__}: {err}"
    return None


def is_machine_read_fault(err: BaseException) -> bool:
    """A read that failed for the machine (an I/O error, too many open files, no memory), not for the file."""
    return isinstance(err, OSError) and err.errno in MACHINE_READ_ERRNOS


def quarantine_undecodable(
    df: pd.DataFrame, manifest_dir: Path, out_csv: Path | None = None, decoded_before: Collection[Path] = ()
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split a manifest into (decodable rows, quarantined rows with a ``reason``); images in ``decoded_before``
    (their current files decoded before) are not decoded again to know.

    When ``out_csv`` is given, the quarantined rows are appended to it (deduplicated by ``sample_id``).
    """
    paths = [resolve_uri(manifest_dir, uri) for uri in df["uri"]]
    reasons = [None if path in decoded_before else decode_problem(path) for path in paths]
    bad = pd.Series([r is not None for r in reasons], index=df.index)
    quarantined = df.loc[bad, ["sample_id", "uri"]].assign(reason=[r for r in reasons if r is not None])
    if out_csv is not None and not quarantined.empty:
        out_csv = Path(out_csv)
        previous = read_csv(out_csv, dtype=str) if out_csv.exists() else pd.DataFrame(columns=QUARANTINE_COLUMNS)
        merged = pd.concat([previous, quarantined], ignore_index=True).drop_duplicates("sample_id", keep="last")
        write_csv(merged, out_csv)
    return df.loc[~bad].reset_index(drop=True), quarantined.reset_index(drop=True)
