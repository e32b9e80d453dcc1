"""Finding the serving environment: kserve (its protobuf, its pins) cannot share one with Airflow, so it usually
lives in its own virtualenv, ``.venv-serve`` (``SERVE_VENV`` in the Makefile and the environment), or wherever
``MAVIAS_SERVE_PYTHON`` points."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mavias.errors import UserError
from mavias.utils.servers import free_port, stop_process, wait_until_answering

REPO_ROOT = Path(__file__).resolve().parents[3]
SERVE_PYTHON_ENV = "MAVIAS_SERVE_PYTHON"  # the serving environment's interpreter, wherever it is
SERVE_VENV_ENV = "SERVE_VENV"  # the Makefile's variable: the virtualenv `make serve-venv` builds
DEFAULT_SERVE_VENV = ".venv-serve"


def serve_venv() -> Path:
    """``$SERVE_VENV`` (relative to the repository, as the Makefile takes it) or the repository's ``.venv-serve``."""
    return REPO_ROOT / os.environ.get(SERVE_VENV_ENV, DEFAULT_SERVE_VENV)


def serve_python() -> Path | None:
    """``$MAVIAS_SERVE_PYTHON``; else this interpreter when it has kserve; else the serving virtualenv's python
    (:func:`serve_venv`); else ``None``."""
    explicit = os.environ.get(SERVE_PYTHON_ENV)
    if explicit:
        if not Path(explicit).is_file():
            raise UserError(f"{SERVE_PYTHON_ENV}={explicit} is not a file: point it at the python of the serving "
                            f"environment (e.g. {DEFAULT_SERVE_VENV}/bin/python) or unset it")
        return Path(explicit)
    if importlib.util.find_spec("kserve") is not None:
        return Path(sys.executable)
    candidate = serve_venv() / "bin" / "python"
    return candidate if candidate.exists() else None


def serve_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment with the repository on PYTHONPATH (the serving venv does not install mavias)."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **(extra or {}), "PYTHONPATH": path}


def require_serve_python() -> Path:
    python = serve_python()
    if python is None:
        raise UserError(f"no serving environment at {serve_venv()}: build it with `make serve-venv`, or point "
                        f"{SERVE_VENV_ENV} (a virtualenv) or {SERVE_PYTHON_ENV} (its python) at one")
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
    """``python -m mavias.ops.serve ARGS`` on free ports, its output in ``log_path``; stopped on exit."""
    http_port, grpc_port = free_port(), free_port()
    command = [str(require_serve_python()), "-m", "mavias.ops.serve", *args, "--http-port", str(http_port),
               "--grpc-port", str(grpc_port)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=serve_environment(env))
    try:
        server = RunningServer(process, http_port, grpc_port, log_path)
        wait_until_answering(f"http://{server.http_url}/v2/health/live", process, timeout_s=timeout_s,
                             log_path=log_path)
        yield server
    finally:
        stop_process(process)
