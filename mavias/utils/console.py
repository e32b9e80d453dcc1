"""One console policy for the package's tables: rich's own width on a terminal; in logs (Airflow task logs, CI,
redirected output) rich would assume 80 columns and cut cells to "…", so there the console is ``LOG_WIDTH`` wide
unless ``COLUMNS`` says otherwise."""

from __future__ import annotations

import os

from rich.console import Console

LOG_WIDTH = 200


def make_console(**options) -> Console:
    """``rich.console.Console(**options)`` with the package's width policy."""
    console = Console(**options)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = LOG_WIDTH
    return console
