"""Fixtures for the serving tests: small exported models (random weights) and the server as a real process.

The server runs in its own virtualenv (``.venv-serve``, built by ``make serve-venv``: kserve cannot share an
environment with Airflow); the tests talk to it with tritonclient over HTTP and gRPC on 127.0.0.1.
"""

from __future__ import annotations

import io
import itertools
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mavias.core.train.config import BackboneConfig, TrainConfig
from mavias.core.train.model import build_main_model
from mavias.ops.export.version import export_checkpoint
from mavias.ops.serve.launch import RunningServer, running_server, serve_python

SIZE = 16
CLASSES = ["bird", "dog", "vehicle"]


def write_checkpoint(path: Path, seed: int) -> Path:
    """A best_*.pt as the trainer writes it, with random weights."""
    cfg = TrainConfig(method="mavias", backbone=BackboneConfig(name="small_cnn", width=4), image_size=SIZE)
    torch.manual_seed(seed)
    model = build_main_model(cfg.backbone, 3, len(CLASSES))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "classes": CLASSES, "config": cfg.model_dump(mode="json")}, path)
    return path


def exported_version(folder: Path, version: str, seed: int) -> Path:
    """A version folder (model.onnx + model_card.json) as `mavias export` writes it."""
    checkpoint = write_checkpoint(folder / "run" / "best_val_acc.pt", seed)
    export_checkpoint(checkpoint, folder / version / "model.onnx", name="scenes", version=version)
    return folder / version


@pytest.fixture(scope="session")
def versions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("versions")
    return {name: exported_version(root, name, seed) for seed, name in enumerate(["v1", "v2"])}


def request(server: RunningServer, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
            timeout: float = 30) -> tuple[int, dict]:
    """GET (no body) or POST ``path``; the status and the JSON answer (4xx/5xx included)."""
    headers = {"Content-Type": "application/json", **(headers or {})} if body is not None else headers or {}
    call = urllib.request.Request(f"http://{server.http_url}{path}", data=body, headers=headers,
                                  method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(call, timeout=timeout) as response:
            return response.status, _answer(response.read())
    except urllib.error.HTTPError as err:
        return err.code, _answer(err.read())


def _answer(body: bytes) -> dict:
    try:
        return json.loads(body or b"{}")
    except ValueError:
        return {"text": body.decode(errors="replace")}


def get(server: RunningServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    return request(server, path, headers=headers)


def post(server: RunningServer, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    return request(server, path, body, headers)


def metric(server: RunningServer, name: str, headers: dict[str, str] | None = None) -> float:
    """The sum of the samples whose line starts with ``name`` (a metric name, or name{labels...)."""
    call = urllib.request.Request(f"http://{server.http_url}/metrics", headers=headers or {})
    with urllib.request.urlopen(call, timeout=5) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name))


def png(size: tuple[int, int], seed: int = 0, mode: str = "RGB") -> bytes:
    """A PNG of random pixels (``size`` = width, height)."""
    channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode).save(buffer, format="PNG")
    return buffer.getvalue()


def v2_body(name="image", datatype="FP32", shape=(1, 3, 16, 16), data=None) -> bytes:
    data = [0.5] * int(np.prod(shape)) if data is None else data
    return json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": list(shape), "data": data}]}).encode()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:
    """``start_server(*args, env=...)`` starts ``python -m mavias.ops.serve`` from the serving venv; stopped at teardown."""
    if serve_python() is None:
        pytest.fail("no serving environment: run `make serve-venv` (make test builds it)")
    numbers = itertools.count()
    with ExitStack() as stack:
        def start(*args: str, env: dict[str, str] | None = None) -> RunningServer:
            log_path = tmp_path / f"server-{next(numbers)}.log"
            return stack.enter_context(running_server(list(args), log_path, env=env))

        yield start
