"""``python -m mavias.serve``: the kserve model server (V1 + V2 REST, V2 gRPC, /metrics) on one ONNX classifier.

The model comes from a local version folder (``--model-dir``) or follows a registry's production pointer
(``--registry s3://bucket/models --name NAME``). Readiness (``/v2/health/ready`` and the model's) stays false until a
verified version is loaded. S3 endpoint and credentials: ``MAVIAS_S3_*`` variables or the standard AWS chain.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import kserve.model_server
from kserve import ModelServer
from kserve.protocol.dataplane import DataPlane
from pydantic import ValidationError

from mavias.errors import UserError
from mavias.registry import ModelRegistry
from mavias.registry.storage import load_settings, make_s3_client
from mavias.serve.model import OnnxClassifier
from mavias.serve.versions import RegistryFollower, registry_location

log = logging.getLogger("mavias.serve")

STANDARD_LOG_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, event and the record's ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in STANDARD_LOG_FIELDS}
        entry = {"time": self.formatTime(record), "level": record.levelname, "logger": record.name,
                 "event": record.getMessage(), **fields}
        return json.dumps(entry, default=str)


class ReadyWhenModelsAre(DataPlane):
    """Server readiness is the readiness of every registered model (kserve's own answer is always true)."""

    async def ready(self) -> bool:
        models = self._model_registry.get_models().values()
        return bool(models) and all(model.ready for model in models)


class RequestGuard:
    """ASGI middleware: refuses bodies over ``max_bytes`` (413) and of unknown length (411); a JSON request without a
    Content-Type (tritonclient's HTTP JSON mode sends none) is read as JSON, a binary-extension one left as bytes."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is None or not length.isdigit():
            return await _reply(send, 411, "send a Content-Length header; chunked request bodies are not accepted")
        if int(length) > self.max_bytes:
            return await _reply(send, 413, f"request body of {int(length)} bytes exceeds the limit of "
                                           f"{self.max_bytes}; send smaller batches (or use gRPC)")
        if b"content-type" not in headers and b"inference-header-content-length" not in headers:
            scope = scope | {"headers": [*scope["headers"], (b"content-type", b"application/json")]}
        return await self.app(scope, receive, send)


async def _reply(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("mavias", "kserve"):
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logging.INFO)


def _follower(args: argparse.Namespace, model: OnnxClassifier) -> RegistryFollower:
    bucket, prefix = registry_location(args.registry)
    env = {**os.environ, "MAVIAS_S3_BUCKET": bucket, "MAVIAS_S3_MODELS_PREFIX": prefix}
    try:
        settings = load_settings(args.config, environ=env)
    except (OSError, ValidationError) as err:
        raise UserError(f"S3 settings: {err}; set MAVIAS_S3_* or pass --config with an `s3:` section") from err
    registry = ModelRegistry(make_s3_client(settings), settings, args.name)
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="mavias-serve-"))
    return RegistryFollower(registry, model.slot, cache_dir, poll_s=args.poll_seconds)


def serve(args: argparse.Namespace) -> None:
    configure_logging()
    max_bytes = int(args.max_body_mb * 1024 * 1024)
    model = OnnxClassifier(args.name or "model", max_batch=args.max_batch)
    if args.model_dir is not None:
        if not model.slot.load(args.model_dir, str(args.model_dir)):
            raise UserError(f"{args.model_dir} cannot be served (see the log line above); export it again with "
                            "`mavias export`")
        if args.name is None:
            model.name = model.slot.current.card.get("name", "model")
    else:
        _follower(args, model).start()
    # kserve reads its settings from module-level argparse defaults; these are the ones that matter here.
    kserve.model_server.args.grpc_max_receive_message_length = max_bytes
    kserve.model_server.app.add_middleware(RequestGuard, max_bytes=max_bytes)
    server = ModelServer(http_port=args.http_port, grpc_port=args.grpc_port, enable_latency_logging=False)
    server.dataplane = ReadyWhenModelsAre(model_registry=server.registered_models)
    server.register_model(model)  # registered before it is ready, so readiness can report false
    log.info("serving", extra={"model": model.name, "http_port": args.http_port, "grpc_port": args.grpc_port,
                               "source": str(args.model_dir or args.registry)})
    server.start([])
