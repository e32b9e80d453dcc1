"""A loopback relay in front of a real LLM server that records what it forwards and can go down mid-run: after
``stop_after`` forwarded requests it closes its socket, so later requests meet a refused connection."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.loopback import serve_on_loopback, stop_serving


class LLMRelay:
    def __init__(self, upstream: str, stop_after: int | None = None):
        self.upstream = upstream.rstrip("/")
        self.stop_after = stop_after
        self.requests: list[dict[str, Any]] = []
        self.authorizations: set[str] = set()
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> LLMRelay:
        self._server = serve_on_loopback(self._handler())
        return self

    def stop(self) -> None:
        stop_serving(self._server)

    def tags_sent(self) -> list[str]:
        """Every tag the judge sent, read back from the user messages (``Tags: [...]``)."""
        lines = [line for r in self.requests for line in r["messages"][-1]["content"].splitlines()]
        return [tag for line in lines if line.startswith("Tags: ") for tag in json.loads(line.removeprefix("Tags: "))]

    def _forward(self, path: str, body: bytes) -> tuple[int, bytes]:
        request = urllib.request.Request(f"{self.upstream}{path.removeprefix('/v1')}", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with relay._lock:
                    relay.requests.append(json.loads(body))
                    relay.authorizations.add(self.headers.get("Authorization", ""))
                    last = relay.stop_after is not None and len(relay.requests) >= relay.stop_after
                status, payload = relay._forward(self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                if last:  # the server goes down after this answer
                    threading.Thread(target=relay.stop, daemon=True).start()

            def log_message(self, *args) -> None:
                pass

        return Handler
