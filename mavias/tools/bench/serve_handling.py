"""The model server's own share of a request, without any transport: the gRPC servicer's ``ModelInfer`` on a parsed
request (admission, checks, ONNX Runtime, the response built; not serialized) against ``session.run`` on the same
batch, in turns. It runs in the serving environment (kserve's protobuf, no torch), started by
:mod:`mavias.tools.bench.serve`: ``python -m mavias.tools.bench.serve_handling VERSION_DIR BATCH SECONDS`` prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb

from mavias.ops.serve.grpc_api import InferenceServicer
from mavias.ops.serve.model import OnnxClassifier

ROUNDS, WARMUP, MIN_RUNS = 5, 20, 10


async def _times_ms(call: Callable[[], Awaitable[object]], seconds: float) -> list[float]:
    for _ in range(WARMUP):
        await call()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < MIN_RUNS or time.perf_counter() < deadline:
        started = time.perf_counter()
        await call()
        times.append(1000 * (time.perf_counter() - started))
    return times


async def handling_ms(version_dir: Path, batch_size: int, seconds: float) -> dict[str, Any]:
    """p50 of the servicer's handling and of the bare ``session.run``, ``seconds`` each in :data:`ROUNDS` turns."""
    model = OnnxClassifier("bench", max_batch=max(batch_size, 1), workers=1, max_in_flight=1)
    if not model.slot.load(version_dir, None):
        raise SystemExit(f"{version_dir} cannot be served (see the log above)")
    served, servicer = model.slot.current, InferenceServicer(model, repository=False)
    batch = np.random.default_rng(0).random((batch_size, *served.image_shape), dtype=np.float32)
    request = pb.ModelInferRequest(model_name="bench", inputs=[pb.ModelInferRequest.InferInputTensor(
        name=served.input_name, datatype="FP32", shape=batch.shape)], raw_input_contents=[batch.tobytes()])

    async def handle() -> object:
        return await servicer.ModelInfer(request, None)

    async def bare() -> object:
        return served.session.run(None, {served.input_name: batch})

    times: dict[str, list[float]] = {"handler": [], "bare": []}
    try:
        for _ in range(ROUNDS):
            for name, call in (("handler", handle), ("bare", bare)):
                times[name] += await _times_ms(call, seconds / ROUNDS)
    finally:
        model.close()
    handler, bare_p50 = statistics.median(times["handler"]), statistics.median(times["bare"])
    return {"handler_p50_ms": handler, "bare_p50_ms": bare_p50, "overhead_ms": handler - bare_p50,
            "requests": len(times["handler"])}


if __name__ == "__main__":
    folder, size, budget = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(asyncio.run(handling_ms(folder, size, budget))))
