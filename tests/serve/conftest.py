"""Fixtures for the serving tests: small exported models (random weights) and the server as a real process.

The server runs in its own virtualenv (``.venv-serve``, built by ``make serve-venv``: kserve cannot share an
environment with Airflow); the tests talk to it with tritonclient over HTTP and gRPC on 127.0.0.1.
"""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch

from mavias.export.version import export_checkpoint
from mavias.serve.launch import RunningServer, running_server, serve_python
from mavias.train.config import BackboneConfig, TrainConfig
from mavias.train.model import build_main_model

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


def get(server: RunningServer, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{server.http_url}{path}", timeout=5) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:
    """``start_server(*args, env=...)`` starts ``python -m mavias.serve`` from the serving venv; stopped at teardown."""
    if serve_python() is None:
        pytest.fail("no serving environment: run `make serve-venv` (make test builds it)")
    numbers = itertools.count()
    with ExitStack() as stack:
        def start(*args: str, env: dict[str, str] | None = None) -> RunningServer:
            log_path = tmp_path / f"server-{next(numbers)}.log"
            return stack.enter_context(running_server(list(args), log_path, env=env))

        yield start
