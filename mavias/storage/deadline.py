"""A step's deadline on the object store: the time its requests spend waiting on the store, never its own work."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.client import BaseClient


class StorageDeadline(TimeoutError):
    """A step's deadline for the store passed: the endpoint stalled or was unreachable for that long. Not retried."""


class _StoreClock:
    """The time a client spends waiting on the store: wall time while at least one of its requests is in flight
    (parallel transfers count once), never the step's own work between requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._since = 0.0
        self._waited = 0.0

    def started(self, **_: Any) -> None:
        with self._lock:
            if self._in_flight == 0:
                self._since = time.monotonic()
            self._in_flight += 1

    def finished(self, **_: Any) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._waited += time.monotonic() - self._since

    def waited(self) -> float:
        with self._lock:
            return self._waited + (time.monotonic() - self._since if self._in_flight else 0.0)


DEADLINE_ATTR = "mavias_deadline"  # on ``client.meta``: the clock and check a response body's reading uses too


class _Deadline:
    def __init__(self, where: str, bucket: str, deadline_s: float, step: str) -> None:
        self.clock, self.where, self.bucket, self.deadline_s, self.step = _StoreClock(), where, bucket, deadline_s, step

    def check(self, event_name: str = "reading a response body", **_: Any) -> None:
        if self.clock.waited() > self.deadline_s:
            raise StorageDeadline(
                f"the object store {self.where} did not answer within the {self.step} step's deadline of "
                f"{self.deadline_s:g} s (at {event_name.rsplit('.', 1)[-1]} on bucket {self.bucket}): it is stalled "
                "or unreachable; check the endpoint, or raise s3.step_deadline_s if the step is slow but working"
            )


def register_deadline(client: BaseClient, where: str, bucket: str, deadline_s: float, step: str) -> None:
    """Before every attempt of every request (botocore's ``before-send``), and between the chunks of a body read in
    :func:`reading_body`, stop the step once its requests have waited on the store for ``deadline_s`` in all."""
    deadline = _Deadline(where, bucket, deadline_s, step)
    setattr(client.meta, DEADLINE_ATTR, deadline)
    events = client.meta.events
    events.register("before-call.s3", deadline.clock.started)
    events.register("after-call.s3", deadline.clock.finished)
    events.register("after-call-error.s3", deadline.clock.finished)
    events.register("before-send.s3", deadline.check)


@contextmanager
def reading_body(client: BaseClient) -> Iterator[Callable[[], None]]:
    """While a response body streams in (botocore's call ended with its headers), the store is still being waited
    on: the clock runs, and the check it yields stops a trickling store at the deadline."""
    deadline = getattr(client.meta, DEADLINE_ATTR, None)
    if deadline is None:
        yield lambda: None
        return
    deadline.clock.started()
    try:
        yield deadline.check
    finally:
        deadline.clock.finished()
