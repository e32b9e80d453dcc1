"""Where `mavias serve` finds its environment: MAVIAS_SERVE_PYTHON, else this interpreter with kserve, else the
virtualenv SERVE_VENV names (the Makefile's variable), else the repository's .venv-serve."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from mavias.errors import UserError
from mavias.ops.serve import launch


@pytest.fixture
def no_kserve_here(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: None if name == "kserve" else find_spec(name))
    monkeypatch.delenv(launch.SERVE_PYTHON_ENV, raising=False)


def _venv(folder: Path) -> Path:
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    return python


def test_serve_venv_names_the_virtualenv(no_kserve_here, monkeypatch, tmp_path):
    python = _venv(tmp_path / "serving")
    monkeypatch.setenv(launch.SERVE_VENV_ENV, str(tmp_path / "serving"))
    assert launch.serve_python() == python
    monkeypatch.setenv(launch.SERVE_VENV_ENV, str(tmp_path / "elsewhere"))
    assert launch.serve_python() is None
    with pytest.raises(UserError, match=f"no serving environment at {tmp_path / 'elsewhere'}.*SERVE_VENV"):
        launch.require_serve_python()


def test_a_relative_serve_venv_is_taken_from_the_repository(no_kserve_here, monkeypatch):
    monkeypatch.setenv(launch.SERVE_VENV_ENV, "some-venv")
    assert launch.serve_venv() == launch.REPO_ROOT / "some-venv"


def test_mavias_serve_python_wins(no_kserve_here, monkeypatch, tmp_path):
    python = _venv(tmp_path / "explicit")
    monkeypatch.setenv(launch.SERVE_PYTHON_ENV, str(python))
    monkeypatch.setenv(launch.SERVE_VENV_ENV, str(tmp_path / "other"))
    assert launch.serve_python() == python
    monkeypatch.setenv(launch.SERVE_PYTHON_ENV, str(tmp_path / "missing" / "python"))
    with pytest.raises(UserError, match="MAVIAS_SERVE_PYTHON=.* is not a file"):
        launch.serve_python()


def test_a_model_folder_that_does_not_exist_is_one_line(tmp_path):
    """`mavias serve` hands over to the serving environment's interpreter: the message comes from there."""
    if launch.serve_python() is None:
        pytest.fail("no serving environment: run `make serve-venv` (make test builds it)")
    done = subprocess.run([sys.executable, "-m", "mavias.cli", "serve", "--model-dir", str(tmp_path / "typo")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "is not a folder" in done.stderr and "check the path" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("taken", [True, False])
def test_a_port_that_cannot_be_listened_on_is_named_before_the_model_loads(tmp_path, taken):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1]) if taken else "99999"
        done = subprocess.run([sys.executable, "-m", "mavias.cli", "serve", "--model-dir", str(tmp_path),
                               "--http-port", port], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    expect = "Address already in use); stop what listens there, or pass --http-port" if taken else "is not a port"
    assert expect in done.stderr


def test_one_port_for_rest_and_grpc_is_named_before_the_model_loads(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mavias.cli", "serve", "--model-dir", str(tmp_path),
                           "--http-port", "18080", "--grpc-port", "18080"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--http-port and --grpc-port are both 18080" in done.stderr
