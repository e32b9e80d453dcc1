"""Tables users hand to the command line: Parquet, or CSV read as text (columns are typed by their validators); a
file of another kind is one readable error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mavias.errors import UserError
from mavias.utils.userfiles import require_file, short_reason

T = TypeVar("T")


def read_parquet_or_csv(path: Path, *, what: str, error: type[UserError] = UserError) -> pd.DataFrame:
    """The table at ``path``; ``error`` (naming it as ``what``) when it is missing or of another format."""
    require_file(path, what, error)
    if path.suffix == ".parquet":
        return read_parquet(path, what=what, error=error)
    if path.suffix == ".csv":
        return read_csv_text(path, what=what, error=error)
    raise error(f"{what} {path}: unsupported format {path.suffix!r} (use .parquet or .csv)")


def read_csv_text(path: Path, *, what: str, error: type[UserError] = UserError) -> pd.DataFrame:
    """The CSV table at ``path``, every cell as text; ``error`` when it is missing, empty, not text or malformed."""
    require_file(path, what, error)
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise error(f"{what} {path} cannot be read as CSV ({short_reason(err)})",
                    hint="pass a UTF-8 text table with a header row, its cells separated by commas") from None


def parquet_columns(path: Path, *, what: str, error: type[UserError] = UserError) -> list[str]:
    """The column names of the Parquet file at ``path``; ``error`` when it is missing or not Parquet."""
    return _parquet(lambda: pq.read_schema(path).names, path, what, error)


def read_parquet(path: Path, *, what: str, columns: list[str] | None = None,
                 error: type[UserError] = UserError) -> pd.DataFrame:
    """The Parquet table at ``path`` (only ``columns`` when given); ``error`` when it is missing or not Parquet."""
    return _parquet(lambda: pd.read_parquet(path, columns=columns), path, what, error)


def _parquet(read: Callable[[], T], path: Path, what: str, error: type[UserError]) -> T:
    require_file(path, what, error)
    try:
        return read()
    except (pa.ArrowException, OSError) as err:
        raise error(f"{what} {path} cannot be read as Parquet ({short_reason(err)})",
                    hint="pass the .parquet file that mavias wrote, or a table written with pandas' to_parquet"
                    ) from None
