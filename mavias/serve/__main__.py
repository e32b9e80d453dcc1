"""``python -m mavias.serve``: see :mod:`mavias.serve.server`. Arguments are parsed before kserve is imported, since
kserve parses ``sys.argv`` on import."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_MAX_BODY_MB = 64
DEFAULT_MAX_BATCH = 256


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mavias serve", description=(
        "Serve an ONNX classifier over the open inference protocol (kserve): REST V1 + V2, gRPC V2, /metrics. "
        "Listens on all interfaces."))
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-dir", type=Path, help="a version folder: model_card.json and the ONNX file it names")
    source.add_argument("--registry", help="s3://BUCKET/PREFIX of the model registry; serves --name's production")
    parser.add_argument("--name", help="model name (in the registry and on the endpoint paths)")
    parser.add_argument("--config", type=Path, help="YAML with S3 settings (endpoint, credentials); else MAVIAS_S3_*")
    parser.add_argument("--poll-seconds", type=float, default=10.0, help="how often to check the production pointer")
    parser.add_argument("--cache-dir", type=Path, help="where downloaded versions are kept; default: a temp folder")
    parser.add_argument("--http-port", type=int, default=8080)
    parser.add_argument("--grpc-port", type=int, default=8081)
    parser.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB,
                        help="request size limit (HTTP, gRPC)")
    parser.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH, help="images per request at most")
    args = parser.parse_args(argv)
    if args.registry and not args.name:
        parser.error("--registry needs --name, the model's name in the registry")
    return args


def main() -> None:
    args = parse_args(sys.argv[1:])
    sys.argv = sys.argv[:1]
    from mavias.errors import UserError
    from mavias.serve.server import serve

    try:
        serve(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
