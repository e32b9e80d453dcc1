"""The served classifier, whatever the protocol: readiness, admission, off-loop parsing and ONNX Runtime, metrics.

Parsing, decoding and preprocessing run in a bounded worker pool (PIL and numpy release the GIL), so the event
loop keeps answering liveness while large requests are decoded; at most ``max_in_flight`` inference requests are
admitted at once (the others wait before their bodies are read). Small requests without images are parsed on the
event loop, and batches of up to :data:`INLINE_BATCH` images run ONNX Runtime there: a thread hop would cost more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from mavias.ops.serve.metrics import LATENCY, LOAD_FAILURES, LOADS, REQUESTS, SERVING
from mavias.ops.serve.tensors import RequestError
from mavias.ops.serve.versions import ModelSlot, RegistryFollower, ServedVersion

log = logging.getLogger(__name__)

INLINE_BATCH = 4  # up to this many images ONNX Runtime runs on the event loop
INLINE_BYTES = 64 * 1024  # requests up to this size without encoded images are parsed on the event loop

Answer = TypeVar("Answer")
T = TypeVar("T")


class NotReady(RuntimeError):
    """No verified version to answer with (HTTP 503, gRPC UNAVAILABLE)."""


@dataclass(frozen=True)
class Prediction:
    version: str
    logits: np.ndarray  # float32 [N, classes]
    labels: list[str]


async def _off_loop(executor: Executor | None, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in ``executor``. A caller cancelled meanwhile (its client gone, its deadline passed) still waits
    for the job, so that its admission slot is not given to another request while the job holds its memory."""
    future = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        raise


class OnnxClassifier:
    def __init__(self, name: str, *, max_batch: int, workers: int, max_in_flight: int,
                 max_staleness_s: float | None = None):
        self.name, self.max_batch, self.max_staleness_s = name, max_batch, max_staleness_s
        self.slot = ModelSlot(self._loaded, self._refused)
        self.follower: RegistryFollower | None = None
        self.online = True  # False after an unload through the model repository extension
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="decode")
        self._admission = asyncio.Semaphore(max_in_flight)

    def _loaded(self, served: ServedVersion, previous: ServedVersion | None, seconds: float) -> None:
        if previous is not None:
            SERVING.labels(self.name, previous.version).set(0)
        SERVING.labels(self.name, served.version).set(1)
        LOADS.labels(self.name).inc()
        log.info("model_loaded", extra={
            "model": self.name, "version": served.version, "seconds": round(seconds, 3),
            "sha256": served.card["onnx"]["sha256"], "providers": served.session.get_providers()})

    def _refused(self, version: str, reason: str) -> None:
        LOAD_FAILURES.labels(self.name).inc()
        serving = self.slot.current.version if self.slot.current else None
        log.error("model_refused", extra={"model": self.name, "version": version, "reason": reason, "serving": serving})

    def not_ready_reason(self) -> str | None:
        """Why the model cannot answer now, or ``None`` when it is ready."""
        if self.slot.current is None:
            return "no verified model version is loaded yet"
        if not self.online:
            return "the model was unloaded through the model repository API; load it again"
        if self.follower is not None and not self.follower.alive:
            return "the registry follower has stopped"
        if self.follower is not None and self.max_staleness_s is not None \
                and self.follower.age_s > self.max_staleness_s:
            return f"the registry has not been polled successfully for {self.follower.age_s:.0f} s"
        return None

    @property
    def ready(self) -> bool:
        return self.not_ready_reason() is None

    def admission(self) -> asyncio.Semaphore:
        return self._admission

    async def infer(self, parse: Callable[[ServedVersion], np.ndarray], answer: Callable[[Prediction], Answer], *,
                    inline: bool, started: float) -> Answer:
        """Parse (on the loop when ``inline``, else in the pool), run the version serving now and ``answer`` (the
        protocol's response); the latency metric covers ``started`` (the handler's entry) to the answer."""
        served = self.slot.current
        reason = self.not_ready_reason()
        if served is None or reason is not None:
            REQUESTS.labels(self.name, served.version if served else "none", "not_ready").inc()
            raise NotReady(reason)
        try:
            batch = parse(served) if inline else await _off_loop(self._pool, parse, served)
            logits = served.run(batch) if len(batch) <= INLINE_BATCH else await _off_loop(None, served.run, batch)
            response = answer(Prediction(served.version, logits, [served.classes[i] for i in logits.argmax(1)]))
        except RequestError as err:
            REQUESTS.labels(self.name, served.version, "invalid").inc()
            log.info("request_refused", extra={"model": self.name, "version": served.version, "reason": str(err)})
            raise
        except Exception:
            REQUESTS.labels(self.name, served.version, "error").inc()
            log.exception("request_failed", extra={"model": self.name, "version": served.version})
            raise
        LATENCY.labels(self.name, served.version).observe(time.perf_counter() - started)
        REQUESTS.labels(self.name, served.version, "ok").inc()
        return response

    def io_metadata(self) -> tuple[list[dict], list[dict]]:
        """Inputs and outputs as the open inference protocol's model metadata lists them (-1: the batch axis)."""
        served = self.slot.current
        if served is None:
            raise NotReady("no verified model version is loaded yet")
        inputs = [{"name": served.input_name, "datatype": "FP32", "shape": [-1, *served.image_shape]}]
        outputs = [{"name": "logits", "datatype": "FP32", "shape": [-1, len(served.classes)]},
                   {"name": "label", "datatype": "BYTES", "shape": [-1]}]
        return inputs, outputs

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.follower is not None:
            self.follower.stop()
