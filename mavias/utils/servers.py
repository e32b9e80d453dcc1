"""Helpers for the local servers the demo and the tests start on 127.0.0.1 (S3-compatible, SMTP, LLM)."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tenacity import Retrying, retry_if_exception_type, retry_if_not_exception_type, stop_after_delay, wait_fixed

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


def bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now (the system's reason), or None when it can."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: a closed port in TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as err:
            return err.strerror or str(err)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ProcessExited(Exception):
    """The process waited on exited before it was ready."""

    def __init__(self, code: int):
        super().__init__(f"exited with code {code}")
        self.code = code


def wait_for(check: Callable[[], object], process: subprocess.Popen | None, *, timeout_s: float, interval_s: float,
             retry_on: type[Exception] | tuple[type[Exception], ...] = Exception) -> None:
    """Call ``check`` until it returns without raising one of ``retry_on``; :class:`ProcessExited` as soon as
    ``process`` has exited, otherwise the last failure once ``timeout_s`` have passed."""

    def attempt() -> None:
        try:
            check()
        except retry_on:
            if process is not None and process.poll() is not None:
                raise ProcessExited(process.returncode) from None
            raise

    Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(interval_s), reraise=True,
             retry=retry_if_exception_type(retry_on) & retry_if_not_exception_type(ProcessExited))(attempt)


def wait_until_answering(url: str, process: subprocess.Popen, *, timeout_s: float = 30.0,
                         log_path: Path | None = None) -> None:
    """Poll ``url`` until any HTTP answer arrives; fail early if ``process`` exits (with its log's tail)."""

    def answers() -> None:
        try:
            urllib.request.urlopen(url, timeout=1).close()
        except urllib.error.HTTPError:  # any HTTP answer means it is up
            pass

    try:
        wait_for(answers, process, timeout_s=timeout_s, interval_s=0.1, retry_on=OSError)
    except ProcessExited as exited:
        tail = log_path.read_text()[-2000:] if log_path and log_path.exists() else ""
        raise RuntimeError(f"{process.args[:3]} exited with code {exited.code}\n{tail}") from None
    except OSError:
        raise RuntimeError(f"nothing answered on {url} within {timeout_s:.0f} s") from None


def stop_process(process: subprocess.Popen, *, grace_s: float = 10.0) -> None:
    """Terminate, then kill if it has not exited within ``grace_s``."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
