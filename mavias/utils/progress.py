"""One progress policy for the package: live bars on a terminal, plain lines in logs.

When the output is not a terminal (Airflow task logs, CI, ``| tee``, a file) a redrawn bar would leave carriage
returns and blanked lines behind, so there a bar writes plain lines instead: one every ``LOG_INTERVAL_S`` seconds
while it runs and one when it ends (none for a transient bar, ``leave=False``, such as an epoch's batches), without
colours or block characters. :func:`progress_line` writes one line of its own in either mode.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

LOG_INTERVAL_S = 60.0


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    return hasattr(stream, "isatty") and stream.isatty()


class _LogLines(tqdm):
    """A tqdm bar that writes each refresh as one line, never a carriage return, and skips tqdm's first frame."""

    def __init__(self, *args, **kwargs):
        self._started, self._shown = False, None
        super().__init__(*args, **kwargs)
        self._started = True

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg == "" or not self._started:  # tqdm blanking its line, or its frame at 0 before any work
            return False
        self.fp.write(f"{self if msg is None else msg}\n")
        self.fp.flush()
        self._shown = (self.n, self.postfix)
        return True

    def clear(self, nolock: bool = False) -> None:
        """Lines are never erased."""

    def close(self) -> None:
        last_line = not self.disable and self.leave is not False and self._shown != (self.n, self.postfix)
        self.leave = False  # tqdm then only blanks its line (nothing here) instead of redrawing it
        if last_line:
            self.display()
        super().close()


def progress_bar(iterable: Iterable | None = None, *, enabled: bool = True, **options) -> tqdm:
    """``tqdm`` with the package's policy; ``options`` are tqdm's (``total``, ``desc``, ``unit``, ``file`` …)."""
    stream = options.setdefault("file", sys.stderr)
    if is_terminal(stream):
        return tqdm(iterable, disable=not enabled, dynamic_ncols=True, **options)
    options.update(mininterval=LOG_INTERVAL_S, maxinterval=LOG_INTERVAL_S, ascii=True)
    return _LogLines(iterable, disable=not enabled, **options)


def progress_line(text: str, *, file: TextIO | None = None) -> None:
    """One line of progress: above the live bars on a terminal, a plain line in a log."""
    stream = sys.stderr if file is None else file
    if is_terminal(stream):
        tqdm.write(text, file=stream)
    else:
        print(text, file=stream, flush=True)


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

    def finished(self, label: str) -> None:
        """A step run elsewhere (a worker process) has ended."""
        self.bar.set_postfix_str(f"{label}: done")
        self.bar.update()

    def close(self) -> None:
        self.bar.close()
