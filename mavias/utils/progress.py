"""One progress-bar policy for the package: live on a terminal, sparse in logs.

When the output is not a terminal (Airflow task logs, CI, ``| tee``) a redrawn bar would write a line per update, so
there it writes at most one line every ``LOG_INTERVAL_S`` seconds, without colours or block characters.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from tqdm import tqdm

LOG_INTERVAL_S = 60.0


def progress_bar(iterable: Iterable | None = None, *, enabled: bool = True, **options) -> tqdm:
    """``tqdm`` with the package's policy; ``options`` are tqdm's (``total``, ``desc``, ``unit``, ``file`` …)."""
    stream = options.setdefault("file", sys.stderr)
    interactive = hasattr(stream, "isatty") and stream.isatty()
    if not interactive:
        options.update(mininterval=LOG_INTERVAL_S, maxinterval=LOG_INTERVAL_S, ascii=True)
    return tqdm(iterable, disable=not enabled, dynamic_ncols=interactive, **options)
