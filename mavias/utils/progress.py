"""One progress-bar policy for the package: live on a terminal, sparse in logs.

When the output is not a terminal (Airflow task logs, CI, ``| tee``) a redrawn bar would write a line per update, so
there it writes at most one line every ``LOG_INTERVAL_S`` seconds, without colours or block characters.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

LOG_INTERVAL_S = 60.0


def progress_bar(iterable: Iterable | None = None, *, enabled: bool = True, **options) -> tqdm:
    """``tqdm`` with the package's policy; ``options`` are tqdm's (``total``, ``desc``, ``unit``, ``file`` …)."""
    stream = options.setdefault("file", sys.stderr)
    interactive = hasattr(stream, "isatty") and stream.isatty()
    if not interactive:
        options.update(mininterval=LOG_INTERVAL_S, maxinterval=LOG_INTERVAL_S, ascii=True)
    return tqdm(iterable, disable=not enabled, dynamic_ncols=interactive, **options)


class StepProgress:
    """One bar over a fixed list of long steps (e.g. every training of a bench); its label names the step under way,
    so a log shows what is running between the sparse lines of a long run. ``seconds`` keeps each finished step's
    wall time, by label."""

    def __init__(self, total: int, *, desc: str, unit: str = "step", enabled: bool = True, **options):
        self.bar = progress_bar(total=total, desc=desc, unit=unit, enabled=enabled, **options)
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        self.bar.set_postfix_str(label)
        start = time.perf_counter()
        yield
        self.seconds[label] = time.perf_counter() - start
        self.bar.update()

    def close(self) -> None:
        self.bar.close()
