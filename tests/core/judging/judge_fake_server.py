"""A real local HTTP server speaking the OpenAI chat API that misbehaves on purpose, one scripted reply per request."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.loopback import serve_on_loopback, stop_serving

Request = dict[str, Any]


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def completion(content: str, finish_reason: str = "stop") -> Reply:
    return Reply(body={"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": finish_reason}]})  # fmt: skip


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body={"error": {"message": message, "type": "error"}}, headers=headers or {})


def batch_tags(request: Request) -> list[str]:
    """The tags the judge sent, read back from the user message (``Tags: [...]``)."""
    user = request["messages"][-1]["content"]
    line = next(line for line in user.splitlines() if line.startswith("Tags: "))
    return json.loads(line.removeprefix("Tags: "))


def relevant_by(rule: Callable[[str], bool]) -> Callable[[Request], Reply]:
    """A well-behaved judge: answers with the batch's tags that satisfy ``rule``."""
    return lambda request: completion(json.dumps({"relevant_tags": [t for t in batch_tags(request) if rule(t)]}))


def delayed(seconds: float, reply: Callable[[Request], Reply]) -> Callable[[Request], Reply]:
    """The same reply, sent only after ``seconds``."""
    return lambda request: dataclasses.replace(reply(request), delay=seconds)


class FakeLLM:
    """Scripted replies first (each a Reply or a function of the request), then ``default`` forever."""

    def __init__(self, default: Callable[[Request], Reply]):
        self.default = default
        self.script: deque[Reply | Callable[[Request], Reply]] = deque()
        self.requests: list[Request] = []

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def then(self, *replies: Reply | Callable[[Request], Reply]) -> FakeLLM:
        self.script.extend(replies)
        return self

    def start(self) -> FakeLLM:
        self._server = serve_on_loopback(self._handler())
        return self

    def stop(self) -> None:
        stop_serving(self._server)

    def _reply(self, request: Request) -> Reply:
        self.requests.append(request)
        step = self.script.popleft() if self.script else self.default
        return step(request) if callable(step) else step

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
                length = int(self.headers.get("content-length", 0))
                reply = fake._reply(json.loads(self.rfile.read(length)))
                time.sleep(reply.delay)
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for name, value in {"content-type": "application/json", **reply.headers}.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (timeout tests)

            def log_message(self, *args) -> None:
                pass

        return Handler
