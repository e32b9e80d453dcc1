"""``python -m mavias.ops.serve``: see :mod:`mavias.ops.serve.server`. Arguments are parsed before kserve is imported, since
kserve parses ``sys.argv`` on import (its protobuf definitions are used for gRPC)."""

from __future__ import annotations

import sys

from mavias.ops.serve.arguments import parse_args


def main() -> None:
    args = parse_args(sys.argv[1:])
    sys.argv = sys.argv[:1]
    from mavias.errors import UserError
    from mavias.ops.serve.server import serve

    try:
        serve(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
