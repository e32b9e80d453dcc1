"""Work over many items (files to upload or pull) on a small thread pool, with a progress bar and bounded memory."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sized
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from mavias.utils.progress import progress_bar

IN_FLIGHT_PER_WORKER = 4
T = TypeVar("T")


def run_parallel(fn: Callable[[T], object], items: Iterable[T], workers: int, desc: str,
                 total: int | None = None) -> None:
    """``fn`` over ``items`` (drawn lazily) on a small thread pool with a progress bar; the first error stops the
    rest. At most ``IN_FLIGHT_PER_WORKER`` items per worker are submitted at a time, so millions of files cost no
    more memory than a few. ``total`` (default: ``len(items)`` when it has one) sizes the progress bar."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    progress = progress_bar(total=total, desc=desc, unit="file")
    pending: set[Future] = set()
    with ThreadPoolExecutor(max_workers=workers) as pool, progress as bar:
        try:
            for item in items:
                if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                    pending = _collect(wait(pending, return_when=FIRST_COMPLETED), bar)
                pending.add(pool.submit(fn, item))
            _collect(wait(pending), bar)
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _collect(waited: tuple[set[Future], set[Future]], bar: Any) -> set[Future]:
    """Raise the first error among the finished futures; return those still running."""
    done, running = waited
    for future in done:
        future.result()
        bar.update()
    return running
