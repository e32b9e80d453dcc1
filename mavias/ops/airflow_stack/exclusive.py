"""One `mavias airflow up` or `down` at a time in a home: two would each record only their own processes in its
state file, leaving the other's running where `down` cannot find them. And a terminated one (SIGTERM, a closed
terminal's SIGHUP) ends like an interrupted one, through its clean-up, not in the middle of it."""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock, Timeout

from mavias.errors import UserError

LOCK_NAME = ".mavias-stack.lock"
Action = TypeVar("Action", bound=Callable[..., Any])


def one_at_a_time(*, makes_home: bool) -> Callable[[Action], Action]:
    """``action(home, ...)`` holding the home's lock, refused at once while another holds it. ``makes_home``: the
    action starts in a home that may not exist yet (`up`); otherwise a missing home has nothing to guard."""

    def wrap(action: Action) -> Action:
        @functools.wraps(action)
        def locked(home: Path, *args: Any, **kwargs: Any) -> Any:
            home = Path(home).resolve()
            if not makes_home and not home.is_dir():
                return action(home, *args, **kwargs)
            home.mkdir(parents=True, exist_ok=True)
            lock = FileLock(home / LOCK_NAME)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                raise UserError(f"another `mavias airflow up` or `down` is running on {home}",
                                hint="wait for it to end (or stop it), then run this again") from None
            try:
                with _terminations_interrupt():
                    return action(home, *args, **kwargs)
            finally:
                lock.release()

        return locked  # type: ignore[return-value]

    return wrap


@contextmanager
def _terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt meanwhile (only the main thread can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
