"""`mavias bench serve`: the model server's requests/s and latency against a bare ONNX Runtime call in-process,
liveness under load, and memory under hostile images.

The server runs as its own process on 127.0.0.1; three clients send one request at a time, at batch 1 and 32:
tritonclient over gRPC (``InferenceServerClient.infer``, what users run) and two lean clients, with the request
built once (what the server costs, with less of the client's): the protocol's generated gRPC stub, and REST V2 with
the binary data extension over a kept-alive connection. The bare figure is ``session.run`` on the same batch in this
process with the same ONNX file. The four take turns, in :data:`ROUNDS` rounds, so that they share the load of a busy
machine. The server's own share (its handling without transport, against ``session.run``, in the serving
environment) comes from :mod:`mavias.tools.bench.serve_handling`; the floor under any Python gRPC server on this stack
from :mod:`mavias.tools.bench.serve_floor`, the thinnest one with the same ONNX Runtime call, sent the lean client's
request in the same turns. Goal: p50 overhead at batch 1 (server p50 - bare p50) <= 0.5 ms, judged with the lean
gRPC client, the others reported beside it. Then the latency of liveness probes while 8 clients send maximum-size
requests (64 encoded 1000 x 1000 images, the per-request pixel budget; goal p99 <= 100 ms), and the server's peak
RSS while image bombs are sent.
The model defaults to a fixed small CNN (48 px, width 32, 3 classes) with random weights: latency does not depend on
the weights, and a fixed model keeps the figures comparable between versions.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import platform
import statistics
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnxruntime as ort
import psutil
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.grpc import service_pb2, service_pb2_grpc

from mavias.errors import ExplainedFailure
from mavias.ops.export.latency import wall_times_ms
from mavias.ops.export.session import make_session
from mavias.ops.serve.launch import (
    RunningServer,
    require_serve_python,
    running_server,
    serve_environment,
)
from mavias.utils.servers import free_port, stop_process

BATCHES = (1, 32)
GOAL_OVERHEAD_MS = 0.5
GOAL_CLIENT = "raw_stub"
CLIENTS = {"tritonclient": "tritonclient.grpc InferenceServerClient.infer",
           "raw_stub": "the generated GRPCInferenceService stub: request built once (raw_input_contents), response "
                       "parsed and its logits read",
           "rest_binary": "REST V2 with the binary data extension over one kept-alive http.client connection: body "
                          "built once, JSON answer parsed and its logits read"}
GRPC_CLIENTS = ("tritonclient", "raw_stub")
ROUNDS = 5
LOAD_CLIENTS, LIVENESS_PROBES = 8, 200
GOAL_LIVENESS_P99_MS = 100.0


def latencies_ms(call: Callable[[], object], *, seconds: float, max_requests: int) -> list[float]:
    return wall_times_ms(call, runs=max_requests, warmup=5, budget_s=seconds, min_runs=10)


def interleaved_ms(calls: dict[str, Callable[[], object]], *, seconds: float,
                   max_requests: int) -> dict[str, list[float]]:
    """Wall times of each call, taken in :data:`ROUNDS` turns (``seconds`` and ``max_requests`` in all, per call)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, call in calls.items():
            times[name] += latencies_ms(call, seconds=seconds / ROUNDS, max_requests=max(1, max_requests // ROUNDS))
    return times


def summary(times: Sequence[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"requests": len(times), "requests_per_s": 1000 * len(times) / sum(times),
            "p50_ms": statistics.median(ordered), "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "mean_ms": statistics.fmean(ordered)}


def tritonclient_call(url: str, name: str, batch: np.ndarray) -> Callable[[], object]:
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput(name, list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch)
    return lambda: client.infer("bench", [tensor])


def raw_stub_call(url: str, name: str, batch: np.ndarray) -> Callable[[], object]:
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
    request = service_pb2.ModelInferRequest(model_name="bench", inputs=[service_pb2.ModelInferRequest.InferInputTensor(
        name=name, datatype="FP32", shape=batch.shape)], raw_input_contents=[batch.tobytes()])
    return lambda: np.frombuffer(stub.ModelInfer(request).raw_output_contents[0], "<f4")


def rest_binary_call(url: str, name: str, batch: np.ndarray) -> Callable[[], object]:
    connection = http.client.HTTPConnection(url, timeout=30)
    raw = batch.tobytes()
    header = json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": list(batch.shape),
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    headers = {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}

    def call() -> object:
        connection.request("POST", "/v2/models/bench/infer", header + raw, headers)
        return np.asarray(json.loads(connection.getresponse().read())["outputs"][0]["data"], np.float32)

    return call


def server_handling(version_dir: Path, batch_size: int, seconds: float) -> dict[str, Any]:
    """The server's own share, measured in the serving environment by :mod:`mavias.tools.bench.serve_handling`."""
    command = [str(require_serve_python()), "-m", "mavias.tools.bench.serve_handling", str(version_dir), str(batch_size),
               str(seconds)]
    done = subprocess.run(command, capture_output=True, text=True, env=serve_environment(), check=False)
    if done.returncode != 0:
        raise ExplainedFailure(f"{' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


@contextmanager
def floor_server(version_dir: Path, log_path: Path, timeout_s: float = 60.0) -> Iterator[str]:
    """:mod:`mavias.tools.bench.serve_floor` on ``version_dir`` on a free port; yields its gRPC address, stopped on exit."""
    address = f"127.0.0.1:{free_port()}"
    command = [str(require_serve_python()), "-m", "mavias.tools.bench.serve_floor", str(version_dir), address.split(":")[1]]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=serve_environment())
    try:
        with grpc.insecure_channel(address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout_s)
            except grpc.FutureTimeoutError:
                raise ExplainedFailure(f"{' '.join(command)} did not answer: {log_path.read_text()[-2000:]}") from None
        yield address
    finally:
        stop_process(process)


def batch_row(server: RunningServer, floor_url: str, bare_session: ort.InferenceSession, batch: np.ndarray, *,
              seconds: float, max_requests: int) -> dict[str, Any]:
    """Bare ONNX Runtime, every client and the floor server on one batch, in turns."""
    name = bare_session.get_inputs()[0].name
    calls = {"bare_onnxruntime": lambda: bare_session.run(None, {name: batch}),
             "tritonclient": tritonclient_call(server.grpc_url, name, batch),
             "raw_stub": raw_stub_call(server.grpc_url, name, batch),
             "rest_binary": rest_binary_call(server.http_url, name, batch),
             "floor_server": raw_stub_call(floor_url, name, batch)}
    times = {k: summary(v) for k, v in interleaved_ms(calls, seconds=seconds, max_requests=max_requests).items()}
    bare, floor = times.pop("bare_onnxruntime"), times.pop("floor_server")
    return {"batch": len(batch), "bare_onnxruntime": bare, "clients": times, "floor_server": floor,
            "overhead_ms": {client: row["p50_ms"] - bare["p50_ms"] for client, row in times.items()},
            "floor_overhead_ms": floor["p50_ms"] - bare["p50_ms"],
            "over_floor_ms": times[GOAL_CLIENT]["p50_ms"] - floor["p50_ms"]}


def fixed_model_version(folder: Path) -> Path:
    """A version folder with the fixed small CNN and random weights (needs torch: the bench's process has it)."""
    import torch

    from mavias.core.train.checkpoints import best_checkpoint
    from mavias.core.train.config import BackboneConfig, TrainConfig
    from mavias.core.train.model import build_main_model
    from mavias.ops.export.version import export_checkpoint

    cfg = TrainConfig(method="mavias", backbone=BackboneConfig(name="small_cnn", width=32), image_size=48)
    model = build_main_model(cfg.backbone, 3, 3)
    checkpoint = best_checkpoint(folder / "run", "val_acc")
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


def http_status(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> int | str:
    """The response's status, or what ended the exchange without one (e.g. ``error: ConnectionResetError``): a
    load client or probe records it and goes on, so no measurement is lost to one dropped connection."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers or {}), timeout=120) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError as err:  # refused, reset or timed out: the server's answer to the load is the measurement
        reason = getattr(err, "reason", err)
        return f"error: {type(reason).__name__}"


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
    probes, failed = [], []
    for _ in range(LIVENESS_PROBES):
        started = time.perf_counter()
        status = http_status(f"http://{server.http_url}/v2/health/live")
        probes.append(1000 * (time.perf_counter() - started))
        if status != 200:
            failed.append(status)
        time.sleep(0.02)
    stop.set()
    for thread in threads:
        thread.join()
    p99 = float(np.percentile(probes, 99))
    return {"clients": LOAD_CLIENTS, "request": f"64 PNG images of 1000 x 1000 ({len(body) / 2**20:.1f} MiB)",
            "infer_statuses": _counts(statuses), "probes": len(probes), "failed_probes": _counts(failed),
            "p50_ms": statistics.median(probes), "p99_ms": p99, "max_ms": max(probes),
            "goal_p99_ms": GOAL_LIVENESS_P99_MS, "meets_goal": p99 <= GOAL_LIVENESS_P99_MS and not failed}


def _counts(statuses: list[int | str]) -> dict[str, int]:
    return {str(k): statuses.count(k) for k in sorted(set(statuses), key=str)}


def peak_rss_during_bombs(server: RunningServer) -> dict[str, Any]:
    """The server's RSS, sampled every 5 ms, while hostile images are sent one request after another."""
    bombs = {"39,000,000 x 1 PNG": [blank_png((39_000_000, 1))], "20,000,000 x 1 PNG": [blank_png((20_000_000, 1))],
             "6000 x 6000 PNG": [blank_png((6_000, 6_000))],
             "4 x 5000 x 4000 RGB PNGs": [blank_png((5_000, 4_000), "RGB")] * 4,
             "30,000 images of 16 x 16": [smooth_png((16, 16))] * 30_000}
    process, samples, stop = psutil.Process(server.process.pid), [], threading.Event()
    baseline = process.memory_info().rss

    def sample() -> None:
        try:
            while not stop.is_set():
                samples.append(process.memory_info().rss)
                time.sleep(0.005)
        except psutil.Error:  # the server died: its statuses say so, the samples so far stand
            return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    statuses = {name: http_status(f"http://{server.http_url}/v2/models/bench/infer", *bytes_request(items))
                for name, items in bombs.items()}
    stop.set()
    sampler.join()
    return {"baseline_rss_mib": baseline / 2**20, "peak_rss_mib": max(samples, default=baseline) / 2**20,
            "statuses": statuses, "server_alive": process.is_running()}


def run_serve_bench(model_dir: Path | None, *, seconds: float, max_requests: int, work: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        version_dir = model_dir or fixed_model_version(Path(tmp))
        card = json.loads((version_dir / "model_card.json").read_text())
        bare_session = make_session(version_dir / card["onnx"]["file"], providers=["CPUExecutionProvider"])
        image_shape = tuple(int(d) for d in bare_session.get_inputs()[0].shape[1:])
        with running_server(["--model-dir", str(version_dir), "--name", "bench"], work / "server.log") as server, \
                floor_server(version_dir, work / "floor_server.log") as floor_url:
            rows = [batch_row(server, floor_url, bare_session,
                              np.random.default_rng(0).random((size, *image_shape), dtype=np.float32),
                              seconds=seconds, max_requests=max_requests) for size in BATCHES]
            load_latency = os.getloadavg()
            liveness = liveness_under_load(server)
            bombs = peak_rss_during_bombs(server)
        for row in rows:
            share = row["server_handling"] = server_handling(version_dir, row["batch"], seconds)
            row["transport_and_client_ms"] = {client: times["p50_ms"] - share["handler_p50_ms"]  # the gRPC handler's
                                              for client, times in row["clients"].items() if client in GRPC_CLIENTS}
    overhead = rows[0]["overhead_ms"]
    return {"model": str(model_dir or "fixed model, random weights (48 px small CNN, width 32)"),
            "image_shape": list(image_shape), "onnxruntime": ort.__version__, "providers": ["CPUExecutionProvider"],
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, {os.cpu_count()} CPUs",
            "load_average": {"start": load_before, "after_latency": load_latency}, "clients": CLIENTS,
            "goal": f"p50 overhead at batch 1 with the {GOAL_CLIENT} client <= {GOAL_OVERHEAD_MS:g} ms "
                    "(the other clients' reported beside it)",
            "goal_client": GOAL_CLIENT, "meets_goal": overhead[GOAL_CLIENT] <= GOAL_OVERHEAD_MS,
            "meets_goal_by_client": {client: value <= GOAL_OVERHEAD_MS for client, value in overhead.items()},
            "results": rows, "liveness_under_load": liveness, "bombs": bombs}
