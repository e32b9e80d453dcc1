"""A real S3-compatible server on loopback for tests, a fault-injecting proxy in front of it, and seeding helpers.

Use the fixtures by importing them into a test module::

    from tests.support.s3server import moto_endpoint, s3_settings, s3_client, faulty_proxy  # noqa: F401

``moto_endpoint`` starts one ``moto_server`` process per pytest session however many modules import it.

moto checks If-Match / If-None-Match and then writes, without a lock between the two (widening that gap
with a sleep lets every one of 8 racing conditional PUTs succeed), while S3 and MinIO apply a conditional
write atomically. The server therefore runs moto's own ``main()`` with ``S3Response.put_object`` behind a
lock, so race tests exercise our protocol against a server that keeps S3's guarantee.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import pandas as pd
import pytest
from PIL import Image
from pydantic import SecretStr

from mavias.core.manifest.io import content_sample_id
from mavias.storage.s3 import S3Settings, make_s3_client
from mavias.utils.servers import SERVE_MOTO, free_port, wait_until_answering
from tests.support.loopback import serve_on_loopback, stop_serving

TEST_CREDENTIALS = {"access_key_id": SecretStr("testing"), "secret_access_key": SecretStr("testing")}
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect"}
ERROR_CODES = {500: "InternalError", 501: "NotImplemented", 503: "SlowDown"}


# -- the server ----------------------------------------------------------------------------------------------

# The demo's moto_server (SERVE_MOTO), with conditional PUTs made atomic as on S3 (see the module docstring).
SERVE_ATOMIC_MOTO = """
import threading
from moto.s3.responses import S3Response

lock = threading.Lock()
unlocked_put_object = S3Response.put_object

def put_object(self):
    with lock:
        return unlocked_put_object(self)

S3Response.put_object = put_object
""" + SERVE_MOTO


class MotoServer:
    def __init__(self, log_dir: Path):
        port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self.log_path = log_dir / "moto_server.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", SERVE_ATOMIC_MOTO, "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until_answering(self.endpoint_url, self.process, timeout_s=20, log_path=self.log_path)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_SERVER = pytest.StashKey[MotoServer]()


@pytest.fixture(scope="session")
def moto_endpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``http://127.0.0.1:<port>`` of a moto_server started for this session and stopped at its end."""
    stash = request.config.stash
    if _SERVER not in stash:  # a session fixture imported into several modules is set up once per module
        stash[_SERVER] = MotoServer(tmp_path_factory.mktemp("moto"))
        request.config.add_cleanup(stash[_SERVER].stop)
    return stash[_SERVER].endpoint_url


@functools.cache
def _admin_client(endpoint_url: str):  # noqa: ANN202 - boto3 clients have no importable type
    return make_s3_client(S3Settings(bucket="unused", endpoint_url=endpoint_url, **TEST_CREDENTIALS))


def create_bucket(endpoint_url: str, name: str | None = None) -> str:
    """Create a bucket (a fresh uniquely named one by default) and return its name."""
    name = name or f"test-{uuid.uuid4().hex[:12]}"
    _admin_client(endpoint_url).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_settings(moto_endpoint: str) -> S3Settings:
    """Settings for a fresh, empty bucket on the session's server."""
    return S3Settings(bucket=create_bucket(moto_endpoint), endpoint_url=moto_endpoint, **TEST_CREDENTIALS)


@pytest.fixture
def s3_client(s3_settings: S3Settings):  # noqa: ANN201 - boto3 clients have no importable type
    return make_s3_client(s3_settings)


# -- transient faults -------------------------------------------------------------------------------------------


class Fault(NamedTuple):
    status: int
    after_forwarding: bool
    method: str | None  # only requests with this HTTP method, or any
    stall_s: float = 0.0  # > 0: say nothing for this long, then drop the connection (a read timeout)


class FaultInjectingProxy:
    """Reverse proxy on loopback that answers the next N requests (of one HTTP ``method``, if given) with an
    S3 error, 503 SlowDown by default, or stalls them (:meth:`stall_next`); :meth:`go_down` closes its port so
    that connections are refused, :meth:`come_back` listens on the same port again.

    With ``after_forwarding`` the request still reaches the server and only its reply is replaced by the
    error: the "write applied, reply lost" case. Only ``Content-Length`` request bodies are supported,
    which is what botocore sends over plain HTTP.
    """

    def __init__(self, upstream_url: str):
        upstream = urlsplit(upstream_url)
        self.upstream = (upstream.hostname, upstream.port)
        self.requests_seen = 0
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, in order
        self.failures_served = 0
        self._pending: list[Fault] = []
        self._stalled_paths: dict[str, float] = {}
        self._lock = threading.Lock()
        self._serve(0)
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_port}"

    def _serve(self, port: int) -> None:
        self._server = serve_on_loopback(_ProxyHandler, port, proxy=self)

    def go_down(self) -> None:
        """Stop listening: every connection is refused until :meth:`come_back`. The port stays bound by a socket
        that does not listen, so that no other socket (a client's ephemeral port among them) takes it meanwhile."""
        self.stop()
        self._placeholder = socket.socket()
        self._placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the port's TIME_WAITs allow it
        self._placeholder.bind(("127.0.0.1", self._port()))

    def come_back(self) -> None:
        self._placeholder.close()
        self._serve(self._port())

    def _port(self) -> int:
        return int(urlsplit(self.endpoint_url).port)

    def stall_next(self, count: int, seconds: float, *, method: str | None = None) -> None:
        """The next ``count`` requests get no reply for ``seconds``, then their connection is closed."""
        with self._lock:
            self._pending.extend([Fault(0, False, method, seconds)] * count)

    def stall_paths(self, fragment: str | None, seconds: float = 0.0) -> None:
        """Every request whose path (query included) contains ``fragment`` stalls for ``seconds`` until this is
        called with ``None``: a store that hangs on one part of the bucket."""
        with self._lock:
            self._stalled_paths = {} if fragment is None else {fragment: seconds}

    def stall_for(self, path: str) -> float:
        with self._lock:
            return next((s for fragment, s in self._stalled_paths.items() if fragment in path), 0.0)

    def fail_next(
        self, count: int, status: int = 503, *, method: str | None = None, after_forwarding: bool = False
    ) -> None:
        with self._lock:
            self._pending.extend([Fault(status, after_forwarding, method)] * count)

    def next_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.requests_seen += 1
            self.requests.append((method, path))
            index = next((i for i, f in enumerate(self._pending) if f.method in (None, method)), None)
            if index is None:
                return None
            self.failures_served += 1
            return self._pending.pop(index)

    def stop(self) -> None:
        stop_serving(self._server)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence per-request stderr lines
        pass

    def _handle(self) -> None:
        proxy: FaultInjectingProxy = self.server.proxy  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if stall := proxy.stall_for(self.path):
            time.sleep(stall)
            self.close_connection = True
            return
        fault = proxy.next_fault(self.command, self.path)
        if fault is not None and fault.stall_s:
            time.sleep(fault.stall_s)
            self.close_connection = True
            return
        if fault is None or fault.after_forwarding:
            status, headers, payload = self._forward(proxy, body)
        if fault is not None:
            code = ERROR_CODES.get(fault.status, "InternalError")
            status, headers, payload = fault.status, [("Content-Type", "application/xml")], _error_xml(code)
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        if self.command != "HEAD":  # a HEAD reply has no body; its Content-Length is the object's, kept as is
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _forward(self, proxy: FaultInjectingProxy, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*proxy.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        dropped = HOP_BY_HOP if self.command == "HEAD" else HOP_BY_HOP | {"content-length"}
        return response.status, [(k, v) for k, v in response.getheaders() if k.lower() not in dropped], payload

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def _error_xml(code: str) -> bytes:
    return f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>injected fault</Message></Error>".encode()


@pytest.fixture
def faulty_proxy(moto_endpoint: str) -> Iterator[FaultInjectingProxy]:
    proxy = FaultInjectingProxy(moto_endpoint)
    yield proxy
    proxy.stop()


# -- seeding --------------------------------------------------------------------------------------------------


def png_bytes(seed: str, size: int = 8) -> bytes:
    """A small PNG whose colour, hence bytes and sample id, depends on ``seed``."""
    colour = zlib.crc32(seed.encode()).to_bytes(4, "big")[:3]
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), tuple(colour)).save(buffer, format="PNG")
    return buffer.getvalue()


def partition_files(
    name: str, labels: Sequence[str], *, corrupt: int = 0, tags: Sequence[list[str]] | None = None
) -> tuple[pd.DataFrame, dict[str, bytes]]:
    """(manifest, {relative path: bytes}) of a partition; its first ``corrupt`` images are not images; ``tags``
    (one list per image) become the manifest's ``tags`` column."""
    seeds = [f"{name}/{i}" for i in range(len(labels))]
    files = {
        f"images/{i:04d}.png": (b"not an image: " + seed.encode()) if i < corrupt else png_bytes(seed)
        for i, seed in enumerate(seeds)
    }
    manifest = pd.DataFrame(
        {
            "sample_id": pd.Series([content_sample_id(data) for data in files.values()], dtype=str),
            "uri": pd.Series(list(files), dtype=str),
            "label": pd.Series(list(labels), dtype=str),
            "split": pd.Series(["train"] * len(labels), dtype=str),
        }
    )
    if tags is not None:
        manifest["tags"] = list(tags)
    return manifest, files


def write_local_partition(folder: Path, labels: Sequence[str], *, corrupt: int = 0) -> pd.DataFrame:
    """Write a partition's images under ``folder`` and return its manifest (not written)."""
    manifest, files = partition_files(folder.name, labels, corrupt=corrupt)
    for relative, data in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)
    return manifest


def seed_partition(
    client,  # noqa: ANN001 - boto3 client
    settings: S3Settings,
    partition: str,
    labels: Sequence[str],
    *,
    corrupt: int = 0,
    manifest_format: str = "parquet",
    tags: Sequence[list[str]] | None = None,
) -> pd.DataFrame:
    """Upload a partition to ``incoming/<partition>/``: images first, manifest last (as producers must)."""
    manifest, files = partition_files(partition, labels, corrupt=corrupt, tags=tags)
    prefix = f"{settings.incoming_prefix}{partition}/"
    for relative, data in files.items():
        client.put_object(Bucket=settings.bucket, Key=prefix + relative, Body=data)
    buffer = io.BytesIO()
    if manifest_format == "parquet":
        manifest.to_parquet(buffer, index=False)
    else:
        manifest.to_csv(buffer, index=False)
    client.put_object(Bucket=settings.bucket, Key=f"{prefix}manifest.{manifest_format}", Body=buffer.getvalue())
    return manifest
