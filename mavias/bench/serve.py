"""`mavias bench serve`: the model server's requests/s and latency against a bare ONNX Runtime call in-process.

The server (kserve, ONNX Runtime) runs as its own process on 127.0.0.1; tritonclient over gRPC is the load generator,
one request at a time in a loop bounded by a time budget and a request count, at batch 1 and 32. The bare figure is
``session.run`` on the same batch in this process with the same ONNX file. Goal: p50 at batch 1 <= 2 x bare + 1 ms.
The model defaults to the demo's architecture (48 px small CNN, width 32) with random weights: latency does not
depend on the weights.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient

from mavias.export.latency import wall_times_ms
from mavias.export.session import make_session
from mavias.serve.launch import running_server
from mavias.serve.versions import load_version

BATCHES = (1, 32)
GOAL_FACTOR, GOAL_OFFSET_MS = 2.0, 1.0


def latencies_ms(call: Callable[[], object], *, seconds: float, max_requests: int) -> list[float]:
    return wall_times_ms(call, runs=max_requests, warmup=5, budget_s=seconds, min_runs=10)


def summary(times: Sequence[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"requests": len(times), "requests_per_s": 1000 * len(times) / sum(times),
            "p50_ms": statistics.median(ordered), "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}


def demo_architecture_version(folder: Path) -> Path:
    """A version folder with the demo's architecture and random weights (needs torch: the bench's process has it)."""
    import torch

    from mavias.export.version import export_checkpoint
    from mavias.train.config import BackboneConfig, TrainConfig
    from mavias.train.model import build_main_model

    cfg = TrainConfig(method="mavias", backbone=BackboneConfig(name="small_cnn", width=32), image_size=48)
    model = build_main_model(cfg.backbone, 3, 3)
    checkpoint = folder / "run" / "best_val_acc.pt"
    checkpoint.parent.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "classes": ["a", "b", "c"], "config": cfg.model_dump(mode="json")},
               checkpoint)
    export_checkpoint(checkpoint, folder / "bench" / "model.onnx", name="bench", version="bench")
    return folder / "bench"


def run_serve_bench(model_dir: Path | None, *, seconds: float, max_requests: int, work: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        version_dir = model_dir or demo_architecture_version(Path(tmp))
        served = load_version(version_dir, providers=["CPUExecutionProvider"])
        bare_session = make_session(version_dir / served.card["onnx"]["file"], providers=["CPUExecutionProvider"])
        rows = []
        with running_server(["--model-dir", str(version_dir), "--name", "bench"], work / "server.log") as server:
            client = grpcclient.InferenceServerClient(server.grpc_url)
            for batch_size in BATCHES:
                batch = np.random.default_rng(0).random((batch_size, *served.image_shape), dtype=np.float32)
                tensor = grpcclient.InferInput(served.input_name, list(batch.shape), "FP32")
                tensor.set_data_from_numpy(batch)
                remote = summary(latencies_ms(lambda: client.infer("bench", [tensor]), seconds=seconds,
                                              max_requests=max_requests))
                bare = summary(latencies_ms(lambda: bare_session.run(None, {served.input_name: batch}),
                                            seconds=seconds, max_requests=max_requests))
                rows.append({"batch": batch_size, "server": remote, "bare_onnxruntime": bare,
                             "overhead_ms": remote["p50_ms"] - bare["p50_ms"]})
    first = rows[0]
    goal_ms = GOAL_FACTOR * first["bare_onnxruntime"]["p50_ms"] + GOAL_OFFSET_MS
    return {"model": str(model_dir or "demo architecture, random weights (48 px small CNN, width 32)"),
            "image_shape": list(served.image_shape), "onnxruntime": ort.__version__,
            "providers": ["CPUExecutionProvider"],
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}", "client": "tritonclient gRPC",
            "goal": f"p50 at batch 1 <= {GOAL_FACTOR:g} x bare + {GOAL_OFFSET_MS:g} ms = {goal_ms:.2f} ms",
            "meets_goal": first["server"]["p50_ms"] <= goal_ms, "results": rows}
