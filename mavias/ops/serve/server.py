"""``python -m mavias.ops.serve``: the model server (V1 + V2 REST, V2 gRPC, /metrics) on one ONNX classifier.

The model comes from a local version folder (``--model-dir``) or follows a registry's production pointer
(``--registry s3://bucket/models --name NAME``). Readiness (``/v2/health/ready`` and the model's) stays false until a
verified version is loaded. S3 endpoint and credentials: ``MAVIAS_S3_*`` variables or the standard AWS chain.
REST (uvicorn, :mod:`mavias.ops.serve.rest`) and gRPC (grpc.aio, :mod:`mavias.ops.serve.grpc_api`) share one event loop,
uvloop's (it wakes up faster than asyncio's own: a tenth of a millisecond less per small request).
See docs/serving.md for the threat model and the limits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path

import uvicorn
import uvloop
from pydantic import ValidationError

from mavias.errors import UserError
from mavias.ops.registry import ModelRegistry
from mavias.ops.serve.grpc_api import create_server
from mavias.ops.serve.model import OnnxClassifier
from mavias.ops.serve.rest import create_app
from mavias.ops.serve.versions import RegistryFollower, registry_location
from mavias.storage.s3 import load_settings, make_s3_client
from mavias.utils.servers import bind_problem

log = logging.getLogger("mavias.ops.serve")

STANDARD_LOG_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, event, the record's ``extra`` fields and its stack, if any."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in STANDARD_LOG_FIELDS}
        entry = {"time": self.formatTime(record), "level": record.levelname, "logger": record.name,
                 "event": record.getMessage(), **fields}
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("mavias", "uvicorn", "grpc"):
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logging.INFO)


def read_token(path: Path) -> str:
    """The bearer token in ``path`` (surrounding whitespace ignored)."""
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"--auth-token-file {path}: cannot read it ({err})") from None
    if not token:
        raise UserError(f"--auth-token-file {path} is empty; write the bearer token in it")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise UserError(f"--auth-token-file {path}: a bearer token is printable ASCII without spaces")
    return token


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


async def _run(args: argparse.Namespace, model: OnnxClassifier, token: str | None) -> None:
    max_bytes = int(args.max_body_mb * 1024 * 1024)
    app = create_app(model, repository=args.enable_model_repository, max_bytes=max_bytes,
                     max_json_bytes=int(args.max_json_mb * 1024 * 1024), token=token)
    http = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.http_port, log_config=None, access_log=False,
                                         lifespan="off", timeout_graceful_shutdown=5))
    grpc_server = create_server(model, host=args.host, port=args.grpc_port, max_bytes=max_bytes, token=token,
                                repository=args.enable_model_repository, max_rpcs=4 * args.max_in_flight)
    await grpc_server.start()
    log.info("serving", extra={"model": model.name, "host": args.host, "http_port": args.http_port,
                               "grpc_port": args.grpc_port, "auth": token is not None,
                               "model_repository": args.enable_model_repository,
                               "source": str(args.model_dir or args.registry)})
    try:
        await http.serve()
    finally:
        await grpc_server.stop(grace=2)
        model.close()


def _require_free(host: str, port: int, option: str) -> None:
    """A port another process holds, named before the model loads (the servers would only log it and exit)."""
    try:
        problem = bind_problem(host, port)
    except socket.gaierror as err:
        raise UserError(f"--host {host!r} is not an address of this machine ({err.strerror})",
                        hint="use 127.0.0.1 (the default), or 0.0.0.0 for every interface") from None
    if problem is not None:
        raise UserError(f"cannot listen on {host}:{port} ({problem})",
                        hint=f"stop what listens there, or pass {option} with a free port")


def serve(args: argparse.Namespace) -> None:
    if args.model_dir is not None and not Path(args.model_dir).is_dir():
        raise UserError(f"{args.model_dir} is not a folder", hint="check the path: --model-dir takes the folder "
                        "`mavias export` wrote (model.onnx and its model card)")
    if args.http_port == args.grpc_port:
        raise UserError(f"--http-port and --grpc-port are both {args.http_port}; REST and gRPC each need their own "
                        "port",
                        hint="pass two different ports (the defaults are 8080 and 8081)")
    _require_free(args.host, args.http_port, "--http-port")
    _require_free(args.host, args.grpc_port, "--grpc-port")
    configure_logging()
    token = read_token(args.auth_token_file) if args.auth_token_file else None
    model = OnnxClassifier(args.name or "model", max_batch=args.max_batch, workers=args.decode_workers,
                           max_in_flight=args.max_in_flight, max_staleness_s=args.max_staleness_s)
    if args.model_dir is not None:
        if not model.slot.load(args.model_dir, None):
            raise UserError(f"{args.model_dir} cannot be served (see the log line above); export it again with "
                            "`mavias export`")
        if args.name is None:
            model.name = model.slot.current.card.get("name", "model")
    else:
        model.follower = _follower(args, model)
        model.follower.start()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_run(args, model, token))
