"""`mavias bench serve`: the model server's requests/s and latency against a bare ONNX Runtime call in-process,
liveness under load, and memory under hostile images.

The server runs as its own process on 127.0.0.1; tritonclient over gRPC is the load generator, one request at a
time in a loop bounded by a time budget and a request count, at batch 1 and 32. The bare figure is
``session.run`` on the same batch in this process with the same ONNX file. Goal: p50 overhead at batch 1 (server
p50 - bare p50) <= 0.5 ms. Then the latency of liveness probes while 8 clients send maximum-size requests (64
encoded 1000 x 1000 images, the per-request pixel budget), and the server's peak RSS while image bombs are sent.
The model defaults to the demo's architecture (48 px small CNN, width 32) with random weights: latency does not
depend on the weights.
"""

from __future__ import annotations

import io
import json
import platform
import statistics
import struct
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil
import tritonclient.grpc as grpcclient
from PIL import Image

from mavias.export.latency import wall_times_ms
from mavias.export.session import make_session
from mavias.serve.launch import RunningServer, running_server

BATCHES = (1, 32)
GOAL_OVERHEAD_MS = 0.5
LOAD_CLIENTS, LIVENESS_PROBES = 8, 200


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


def blank_png(size: tuple[int, int], mode: str = "L") -> bytes:
    """A PNG of one colour: tiny on the wire, ``size`` (width, height) pixels once decoded."""
    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, format="PNG")
    return buffer.getvalue()


def smooth_png(size: tuple[int, int], seed: int = 0) -> bytes:
    """A PNG of a smooth random picture (compresses well, decodes as a photo would)."""
    small = np.random.default_rng(seed).integers(0, 256, (10, 10, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(small).resize(size).save(buffer, format="PNG")
    return buffer.getvalue()


def bytes_request(items: list[bytes]) -> tuple[bytes, dict[str, str]]:
    """A V2 body with one BYTES input ``image`` of encoded images, in the binary data extension."""
    raw = b"".join(struct.pack("<I", len(item)) + item for item in items)
    header = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [len(items)],
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header)),
                          "Content-Type": "application/octet-stream"}


def http_status(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers or {}), timeout=120) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def liveness_under_load(server: RunningServer) -> dict[str, Any]:
    """Liveness latency while ``LOAD_CLIENTS`` clients send maximum-size image requests in a loop."""
    body, headers = bytes_request([smooth_png((1_000, 1_000), seed=i % 4) for i in range(64)])
    infer_url, stop, statuses = f"http://{server.http_url}/v2/models/bench/infer", threading.Event(), []

    def client() -> None:
        while not stop.is_set():
            statuses.append(http_status(infer_url, body, headers))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(LOAD_CLIENTS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    probes = []
    for _ in range(LIVENESS_PROBES):
        started = time.perf_counter()
        assert http_status(f"http://{server.http_url}/v2/health/live") == 200
        probes.append(1000 * (time.perf_counter() - started))
        time.sleep(0.02)
    stop.set()
    for thread in threads:
        thread.join()
    return {"clients": LOAD_CLIENTS, "request": f"64 PNG images of 1000 x 1000 ({len(body) / 2**20:.1f} MiB)",
            "infer_statuses": {str(k): statuses.count(k) for k in sorted(set(statuses))},
            "probes": len(probes), "p50_ms": statistics.median(probes),
            "p99_ms": float(np.percentile(probes, 99)), "max_ms": max(probes)}


def peak_rss_during_bombs(server: RunningServer) -> dict[str, Any]:
    """The server's RSS, sampled every 5 ms, while hostile images are sent one request after another."""
    bombs = {"39,000,000 x 1 PNG": [blank_png((39_000_000, 1))], "20,000,000 x 1 PNG": [blank_png((20_000_000, 1))],
             "6000 x 6000 PNG": [blank_png((6_000, 6_000))],
             "4 x 5000 x 4000 RGB PNGs": [blank_png((5_000, 4_000), "RGB")] * 4,
             "30,000 images of 16 x 16": [smooth_png((16, 16))] * 30_000}
    process, samples, stop = psutil.Process(server.process.pid), [], threading.Event()
    baseline = process.memory_info().rss

    def sample() -> None:
        while not stop.is_set():
            samples.append(process.memory_info().rss)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    statuses = {name: http_status(f"http://{server.http_url}/v2/models/bench/infer", *bytes_request(items))
                for name, items in bombs.items()}
    stop.set()
    sampler.join()
    return {"baseline_rss_mib": baseline / 2**20, "peak_rss_mib": max(samples) / 2**20, "statuses": statuses}


def run_serve_bench(model_dir: Path | None, *, seconds: float, max_requests: int, work: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        version_dir = model_dir or demo_architecture_version(Path(tmp))
        card = json.loads((version_dir / "model_card.json").read_text())
        bare_session = make_session(version_dir / card["onnx"]["file"], providers=["CPUExecutionProvider"])
        graph_input = bare_session.get_inputs()[0]
        image_shape = tuple(int(d) for d in graph_input.shape[1:])
        rows = []
        with running_server(["--model-dir", str(version_dir), "--name", "bench"], work / "server.log") as server:
            client = grpcclient.InferenceServerClient(server.grpc_url)
            for batch_size in BATCHES:
                batch = np.random.default_rng(0).random((batch_size, *image_shape), dtype=np.float32)
                tensor = grpcclient.InferInput(graph_input.name, list(batch.shape), "FP32")
                tensor.set_data_from_numpy(batch)
                remote = summary(latencies_ms(lambda: client.infer("bench", [tensor]), seconds=seconds,
                                              max_requests=max_requests))
                bare = summary(latencies_ms(lambda: bare_session.run(None, {graph_input.name: batch}),
                                            seconds=seconds, max_requests=max_requests))
                rows.append({"batch": batch_size, "server": remote, "bare_onnxruntime": bare,
                             "overhead_ms": remote["p50_ms"] - bare["p50_ms"]})
            liveness = liveness_under_load(server)
            bombs = peak_rss_during_bombs(server)
    return {"model": str(model_dir or "demo architecture, random weights (48 px small CNN, width 32)"),
            "image_shape": list(image_shape), "onnxruntime": ort.__version__, "providers": ["CPUExecutionProvider"],
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}", "client": "tritonclient gRPC",
            "goal": f"p50 overhead at batch 1 <= {GOAL_OVERHEAD_MS:g} ms",
            "meets_goal": rows[0]["overhead_ms"] <= GOAL_OVERHEAD_MS, "results": rows,
            "liveness_under_load": liveness, "bombs": bombs}
