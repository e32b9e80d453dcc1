"""`mavias serve`: the model server runs in its own environment (kserve cannot share one with Airflow); its help and
argument errors are answered here, so they need none."""

from __future__ import annotations

import os
from typing import Annotated

import typer


def serve_command(
    ctx: typer.Context,
    help_: Annotated[bool, typer.Option("--help", "-h", help="the server's options")] = False,
) -> None:
    """Serve an exported model (open inference protocol V1/V2 over REST and gRPC, on 127.0.0.1); see --help."""
    from mavias.ops.serve.arguments import parse_args
    from mavias.ops.serve.launch import require_serve_python, serve_environment

    parse_args(["--help"] if help_ else ctx.args)  # prints the help, or one usage error (exit 2), and exits
    args = [str(require_serve_python()), "-m", "mavias.ops.serve", *ctx.args]
    os.execve(args[0], args, serve_environment())
