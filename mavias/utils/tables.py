"""Tables users hand to the command line: Parquet, or CSV read as text (columns are typed by their validators)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mavias.errors import UserError

T = TypeVar("T")


def read_parquet_or_csv(path: Path, *, what: str, error: type[UserError] = UserError) -> pd.DataFrame:
    """The table at ``path``; ``error`` (naming it as ``what``) when it is missing or of another format."""
    _require_file(path, what, error)
    if path.suffix == ".parquet":
        return read_parquet(path, what=what, error=error)
    if path.suffix == ".csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    raise error(f"{what} {path}: unsupported format {path.suffix!r} (use .parquet or .csv)")


def parquet_columns(path: Path, *, what: str, error: type[UserError] = UserError) -> list[str]:
    """The column names of the Parquet file at ``path``; ``error`` when it is missing or not Parquet."""
    return _parquet(lambda: pq.read_schema(path).names, path, what, error)


def read_parquet(path: Path, *, what: str, columns: list[str] | None = None,
                 error: type[UserError] = UserError) -> pd.DataFrame:
    """The Parquet table at ``path`` (only ``columns`` when given); ``error`` when it is missing or not Parquet."""
    return _parquet(lambda: pd.read_parquet(path, columns=columns), path, what, error)


def _require_file(path: Path, what: str, error: type[UserError]) -> None:
    if not path.is_file():
        raise error(f"{what} {path} " + ("is a folder, not a file" if path.is_dir() else "does not exist"))


def _parquet(read: Callable[[], T], path: Path, what: str, error: type[UserError]) -> T:
    _require_file(path, what, error)
    try:
        return read()
    except (pa.ArrowException, OSError) as err:
        reason = " ".join(str(err).split())[:200]
        raise error(f"{what} {path} cannot be read as Parquet ({reason})",
                    hint="pass the .parquet file that mavias wrote, or a table written with pandas' to_parquet"
                    ) from None
