"""Finding the serving environment: kserve (its protobuf, its pins) cannot share one with Airflow, so it usually
lives in ``.venv-serve``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from mavias.errors import UserError
from mavias.utils.servers import free_port, stop_process, wait_until_answering

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVE_VENV = REPO_ROOT / ".venv-serve"


def serve_python() -> Path | None:
    """This interpreter when it has kserve, else the repository's ``.venv-serve`` one, else ``None``."""
    if importlib.util.find_spec("kserve") is not None:
        return Path(sys.executable)
    candidate = SERVE_VENV / "bin" / "python"
    return candidate if candidate.exists() else None


def _environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment with the repository on PYTHONPATH (the serving venv does not install mavias)."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **(extra or {}), "PYTHONPATH": path}


def require_serve_python() -> Path:
    python = serve_python()
    if python is None:
        raise UserError(f"no serving environment: build it with `make serve-venv` (creates {SERVE_VENV})")
    return python


@dataclass(frozen=True)
class RunningServer:
    process: subprocess.Popen
    http_port: int
    grpc_port: int
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


@contextmanager
def running_server(args: list[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                   timeout_s: float = 60.0) -> Iterator[RunningServer]:
    """``python -m mavias.serve ARGS`` on free ports, its output in ``log_path``; stopped on exit."""
    http_port, grpc_port = free_port(), free_port()
    command = [str(require_serve_python()), "-m", "mavias.serve", *args, "--http-port", str(http_port),
               "--grpc-port", str(grpc_port)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_environment(env))
    try:
        server = RunningServer(process, http_port, grpc_port, log_path)
        wait_until_answering(f"http://{server.http_url}/v2/health/live", process, timeout_s=timeout_s,
                             log_path=log_path)
        yield server
    finally:
        stop_process(process)


def serve_command(
    ctx: typer.Context,
    help_: Annotated[bool, typer.Option("--help", "-h", help="the server's options")] = False,
) -> None:
    """Serve an exported model (open inference protocol V1/V2 over REST and gRPC, on 127.0.0.1); see --help."""
    args = [str(require_serve_python()), "-m", "mavias.serve", *(["--help"] if help_ else []), *ctx.args]
    os.execve(args[0], args, _environment())
