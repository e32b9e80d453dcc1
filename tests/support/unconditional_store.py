"""A tiny S3-like server on loopback that keeps objects in a dict and, like a store without conditional writes,
ignores If-None-Match and If-Match (or only If-Match): PUT, GET and DELETE of objects, path-style, enough for
botocore.

Use the fixture by importing it into a test module::

    from tests.support.unconditional_store import unconditional_store  # noqa: F401
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import pytest

from tests.support.loopback import serve_on_loopback, stop_serving

NO_SUCH_KEY = b"<?xml version='1.0'?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>"
CONDITION_FAILED = (b"<?xml version='1.0'?><Error><Code>PreconditionFailed</Code>"
                    b"<Message>At least one of the pre-conditions you specified did not hold</Message></Error>")


class UnconditionalStore:
    """The server; ``objects`` maps ``/<bucket>/<key>`` to the body, ``written`` lists every path PUT to.
    With ``honour_if_none_match`` a create over an existing object is refused (412); If-Match is always ignored."""

    def __init__(self, *, honour_if_none_match: bool = False):
        self.honour_if_none_match = honour_if_none_match
        self.objects: dict[str, bytes] = {}
        self.written: list[str] = []
        self._server = serve_on_loopback(_Handler, store=self)
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_port}"

    def stop(self) -> None:
        stop_serving(self._server)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence per-request stderr lines
        pass

    @property
    def store(self) -> UnconditionalStore:
        return self.server.store  # type: ignore[attr-defined]

    @property
    def object_path(self) -> str:
        return urlsplit(self.path).path

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        exists = self.object_path in self.store.objects
        if self.store.honour_if_none_match and self.headers.get("If-None-Match") == "*" and exists:
            self._reply(412, CONDITION_FAILED)
            return
        self.store.objects[self.object_path] = body
        self.store.written.append(self.object_path)
        self._reply(200, b"", etag=hashlib.md5(body).hexdigest())

    def do_GET(self) -> None:
        body = self.store.objects.get(self.object_path)
        if body is None:
            self._reply(404, NO_SUCH_KEY)
        else:
            self._reply(200, body, etag=hashlib.md5(body).hexdigest())

    def do_DELETE(self) -> None:
        self.store.objects.pop(self.object_path, None)
        self._reply(204, b"")

    def _reply(self, status: int, body: bytes, *, etag: str | None = None) -> None:
        self.send_response(status)
        if etag is not None:
            self.send_header("ETag", f'"{etag}"')
        if body:
            self.send_header("Content-Type", "application/xml" if status >= 400 else "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def unconditional_store(request: pytest.FixtureRequest) -> Iterator[UnconditionalStore]:
    """A store that ignores both conditions; parametrized indirectly with True, one that honours If-None-Match."""
    store = UnconditionalStore(honour_if_none_match=getattr(request, "param", False))
    yield store
    store.stop()
