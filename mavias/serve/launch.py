"""Finding the serving environment: kserve cannot share one with Airflow, so it usually lives in ``.venv-serve``."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from mavias.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVE_VENV = REPO_ROOT / ".venv-serve"


def serve_python() -> Path | None:
    """This interpreter when it has kserve, else the repository's ``.venv-serve`` one, else ``None``."""
    if importlib.util.find_spec("kserve") is not None:
        return Path(sys.executable)
    candidate = SERVE_VENV / "bin" / "python"
    return candidate if candidate.exists() else None


def serve_command(
    ctx: typer.Context,
    help_: Annotated[bool, typer.Option("--help", "-h", help="the server's options")] = False,
) -> None:
    """Serve an exported model (open inference protocol V1/V2 over REST and gRPC, via kserve); see --help."""
    python = serve_python()
    if python is None:
        raise UserError(f"no serving environment: build it with `make serve-venv` (creates {SERVE_VENV})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    args = [str(python), "-m", "mavias.serve", *(["--help"] if help_ else []), *ctx.args]
    os.execve(args[0], args, env)
