"""A step's deadline on the object store: the time its requests spend waiting on the store, never its own work."""

from __future__ import annotations

import threading
import time
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


def register_deadline(client: BaseClient, where: str, bucket: str, deadline_s: float, step: str) -> None:
    """Before every attempt of every request (botocore's ``before-send``), stop the step once its requests have
    waited on the store for ``deadline_s`` in all."""
    clock = _StoreClock()

    def guard(event_name: str = "", **_: Any) -> None:
        if clock.waited() > deadline_s:
            raise StorageDeadline(
                f"the object store {where} did not answer within the {step} step's deadline of {deadline_s:g} s "
                f"(at {event_name.rsplit('.', 1)[-1]} on bucket {bucket}): it is stalled or unreachable; "
                "check the endpoint, or raise s3.step_deadline_s if the step is slow but working"
            )

    events = client.meta.events
    events.register("before-call.s3", clock.started)
    events.register("after-call.s3", clock.finished)
    events.register("after-call-error.s3", clock.finished)
    events.register("before-send.s3", guard)
