"""CSV files that people open in a spreadsheet: a text cell (or column name) a spreadsheet would run as a formula is
neutralised as the OWASP CSV-injection guidance says, by a leading single quote.

Tags, uris, reasons and class names come from users and producers, so a tag ``=HYPERLINK(...)`` must open as text.
A text cell gets the quote when it starts with ``=``, ``+``, ``-``, ``@``, a tab, a carriage return or a quote
itself, unless it is a plain number (``-0.5`` cannot run anything); numeric columns are never touched. Lines end
in CRLF (RFC 4180), so a cell holding a carriage return is quoted instead of starting a row (and a cell) of its own.
Round trip: :func:`read_csv` removes the one quote :func:`write_csv` added, so it reads back the values written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from mavias.utils.atomic import atomic_path

QUOTE = "'"
# a quote is escaped too, so that every cell starting with one carries an added quote and the round trip is exact
NEUTRALISED_STARTS = ("=", "+", "-", "@", "\t", "\r", QUOTE)
PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# names a user or producer chose: read back as text even where they look like numbers (class folders 0/, 1/, ...)
NAME_COLUMNS = ("class", "label", "tag", "sample_id")


def neutralise(value: Any) -> Any:
    """``value`` with a leading quote when a spreadsheet would read it as a formula; non-text values unchanged."""
    if isinstance(value, str) and value.startswith(NEUTRALISED_STARTS) and not PLAIN_NUMBER.fullmatch(value):
        return QUOTE + value
    return value


def restore(value: Any) -> Any:
    """The value :func:`neutralise` was given."""
    return value[1:] if isinstance(value, str) and value.startswith(QUOTE) else value


def _map_text(frame: pd.DataFrame, convert: Callable[[Any], Any]) -> pd.DataFrame:
    """``frame`` with ``convert`` applied to its column names and to every cell of its text columns."""
    out = frame.rename(columns=convert)
    for position, dtype in enumerate(frame.dtypes):
        if pd.api.types.is_string_dtype(dtype) or isinstance(dtype, pd.CategoricalDtype):
            out.isetitem(position, frame.iloc[:, position].map(convert))
    return out


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` (without its index) to ``path`` atomically, its formula-like text neutralised."""
    with atomic_path(path) as tmp:
        _map_text(frame, neutralise).to_csv(tmp, index=False, lineterminator="\r\n")
    return Path(path)


def read_csv(path: str | Path, **options: Any) -> pd.DataFrame:
    """A CSV written by :func:`write_csv`, with the values it was given (its :data:`NAME_COLUMNS` as text unless
    ``dtype`` says otherwise); ``options`` go to :func:`pandas.read_csv`."""
    dtype = options.pop("dtype", None)
    if dtype is None or isinstance(dtype, dict):
        dtype = dict.fromkeys(NAME_COLUMNS, str) | (dtype or {})
    return _map_text(pd.read_csv(path, dtype=dtype, **options), restore)
