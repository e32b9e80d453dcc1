"""Latency of the exported graph: ONNX Runtime against PyTorch eager on the CPU, same thread count for both."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from mavias.core.train.model import MainModel
from mavias.ops.export.exporter import INPUT_NAME, OPSET, OUTPUT_NAME, cpu_eval_copy, export_onnx
from mavias.ops.export.session import make_session

LATENCY_GOAL = 0.7  # ONNX Runtime median latency / PyTorch eager median latency


def wall_times_ms(
    call: Callable[[], object], *, runs: int, warmup: int, budget_s: float, min_runs: int = 3
) -> list[float]:
    """Wall times of ``call`` in ms over ``runs`` runs, or fewer (at least ``min_runs``) once ``budget_s`` has passed."""
    for _ in range(warmup):
        call()
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < runs and (len(times) < min_runs or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _median_ms(call: Callable[[], object], *, runs: int, warmup: int, budget_s: float) -> float:
    return statistics.median(wall_times_ms(call, runs=runs, warmup=warmup, budget_s=budget_s))


def torch_latency(
    model: MainModel, batch: int, image_size: int, *, runs: int = 30, warmup: int = 3, budget_s: float = 10.0
) -> float:
    """Median ms of a PyTorch eager forward pass on CPU (at torch's current thread count)."""
    model = cpu_eval_copy(model)
    x = torch.rand(batch, 3, image_size, image_size)
    with torch.inference_mode():
        return _median_ms(lambda: model(x), runs=runs, warmup=warmup, budget_s=budget_s)


def onnx_latency(
    session: ort.InferenceSession,
    batch: int,
    image_size: int,
    *,
    runs: int = 30,
    warmup: int = 3,
    budget_s: float = 10.0,
) -> float:
    """Median ms of one ``session.run`` on a random batch."""
    feed = {INPUT_NAME: np.random.default_rng(0).random((batch, 3, image_size, image_size), dtype=np.float32)}
    return _median_ms(lambda: session.run([OUTPUT_NAME], feed), runs=runs, warmup=warmup, budget_s=budget_s)


def export_latency_benchmark(
    model: MainModel,
    image_size: int,
    *,
    batches: Sequence[int] = (1, 32),
    threads: int | None = None,
    runs: int = 30,
    budget_s: float = 10.0,
) -> dict[str, Any]:
    """PyTorch eager vs ONNX Runtime (CPU provider, graph optimisation ORT_ENABLE_ALL), same thread count for both.

    ``threads`` defaults to torch's current intra-op thread count. Per batch size: median ms of each and their
    ratio; the goal is ONNX <= 0.7 x eager.
    """
    threads = threads or torch.get_num_threads()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = export_onnx(model, Path(tmp) / "model.onnx", image_size=image_size)
            session = make_session(path, providers=["CPUExecutionProvider"], intra_op_threads=threads)
            rows = []
            for batch in batches:
                eager = torch_latency(model, batch, image_size, runs=runs, budget_s=budget_s)
                onnx_ms = onnx_latency(session, batch, image_size, runs=runs, budget_s=budget_s)
                rows.append({"batch": batch, "torch_eager_ms": eager, "onnx_ms": onnx_ms, "ratio": onnx_ms / eager})
    finally:
        torch.set_num_threads(previous_threads)
    return {
        "image_size": image_size,
        "threads": threads,
        "opset": OPSET,
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "goal_ratio": LATENCY_GOAL,
        "meets_goal": all(row["ratio"] <= LATENCY_GOAL for row in rows),
        "results": rows,
    }
