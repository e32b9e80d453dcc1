"""Helpers for the local servers the demo and the tests start on 127.0.0.1 (S3-compatible, SMTP, LLM)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

# moto_server finds the service a request is for by listing its own package's folders, on every request and under its
# dispatch lock; the list cannot change while it runs, so the servers the demo and the tests start list them once
# (about 1.4x the requests a second: BENCHMARKS.md, "The demo's time outside training").
SERVE_MOTO = """
import functools, sys
from moto import backends
from moto.server import main

backends.list_of_moto_modules = functools.cache(lambda scan=backends.list_of_moto_modules: tuple(scan()))
main(sys.argv[1:])
"""  # python -c SERVE_MOTO -H HOST -p PORT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answering(url: str, process: subprocess.Popen, *, timeout_s: float = 30.0,
                         log_path: Path | None = None) -> None:
    """Poll ``url`` until any HTTP answer arrives; fail early if ``process`` exits (with its log's tail)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text()[-2000:] if log_path and log_path.exists() else ""
            raise RuntimeError(f"{process.args[:3]} exited with code {process.returncode}\n{tail}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:  # any HTTP answer means it is up
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answered on {url} within {timeout_s:.0f} s")


def stop_process(process: subprocess.Popen, *, grace_s: float = 10.0) -> None:
    """Terminate, then kill if it has not exited within ``grace_s``."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
