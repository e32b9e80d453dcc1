"""Tables users hand to the command line: Parquet, or CSV read as text (columns are typed by their validators)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mavias.errors import UserError


def read_parquet_or_csv(path: Path, *, what: str, error: type[UserError] = UserError) -> pd.DataFrame:
    """The table at ``path``; ``error`` (naming it as ``what``) when it is missing or of another format."""
    if not path.is_file():
        raise error(f"{what} {path} does not exist")
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    raise error(f"{what} {path}: unsupported format {path.suffix!r} (use .parquet or .csv)")
