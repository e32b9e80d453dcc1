"""The model server's command-line arguments (``mavias serve --help``), importable without the serving environment:
``mavias serve`` checks them before it starts the server's own interpreter."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_MAX_BODY_MB = 64
DEFAULT_MAX_JSON_MB = 8
DEFAULT_MAX_BATCH = 256


def _positive(kind: type) -> object:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return value
    return parse


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give a number from 1 to 65535")
    return int(text)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mavias serve", description=(
        "Serve an ONNX classifier over the open inference protocol: REST V1 + V2, gRPC V2, /metrics. "
        "Listens on 127.0.0.1 unless --host says otherwise; see docs/serving.md for the threat model."))
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-dir", type=Path, help="a version folder: model_card.json and the ONNX file it names")
    source.add_argument("--registry", help="s3://BUCKET/PREFIX of the model registry; serves --name's production")
    parser.add_argument("--name", help="model name (in the registry and on the endpoint paths)")
    parser.add_argument("--config", type=Path, help="YAML with S3 settings (endpoint, credentials); else MAVIAS_S3_*")
    parser.add_argument("--poll-seconds", type=_positive(float), default=10.0,
                        help="how often to check the production pointer")
    parser.add_argument("--max-staleness-s", type=_positive(float),
                        help="readiness turns false when the registry has not been polled successfully for this "
                             "long (default: never)")
    parser.add_argument("--cache-dir", type=Path, help="where downloaded versions are kept; default: a temp folder")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (HTTP and gRPC); 0.0.0.0 for every interface, as in a container")
    parser.add_argument("--http-port", type=_port, default=8080)
    parser.add_argument("--grpc-port", type=_port, default=8081)
    parser.add_argument("--auth-token-file", type=Path,
                        help="a file holding a bearer token that every request but liveness/readiness must send "
                             "(HTTP 'Authorization: Bearer TOKEN', gRPC metadata 'authorization')")
    parser.add_argument("--enable-model-repository", action="store_true",
                        help="the model repository extension (load/unload over the API); needs --auth-token-file")
    parser.add_argument("--max-body-mb", type=_positive(float), default=DEFAULT_MAX_BODY_MB,
                        help="request size limit (HTTP, gRPC)")
    parser.add_argument("--max-json-mb", type=_positive(float), default=DEFAULT_MAX_JSON_MB,
                        help="size limit of JSON request bodies (tensors in JSON are slow to parse: send larger "
                             "ones with the binary data extension or over gRPC)")
    parser.add_argument("--max-batch", type=_positive(int), default=DEFAULT_MAX_BATCH,
                        help="images per request at most")
    parser.add_argument("--decode-workers", type=_positive(int), default=2,
                        help="threads that parse, decode and preprocess requests")
    parser.add_argument("--max-in-flight", type=_positive(int), default=8,
                        help="inference requests processed at once; others wait before their bodies are read")
    args = parser.parse_args(argv)
    if args.registry and not args.name:
        parser.error("--registry needs --name, the model's name in the registry")
    if args.enable_model_repository and not args.auth_token_file:
        parser.error("--enable-model-repository lets a client unload the model: pass --auth-token-file too")
    return args
