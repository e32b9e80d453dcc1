"""A stand-in for the Kubernetes API server, for InferenceService objects only (run as a script).

    python tests/ops/serve/kube_apiserver.py PORT TOKEN

Serves GET and PUT of ``/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices/{name}`` the way the
API server does: bearer-token authentication (401), 404 for an unknown object, optimistic concurrency (a PUT whose
``metadata.resourceVersion`` is not the stored one gets 409 Conflict; a successful one bumps it and the
generation), failures as ``Status`` objects. Test controls under ``/_test/``:

- ``POST /_test/objects``: store an object (resourceVersion 1);
- ``POST /_test/faults`` ``{"status": 503, "count": 2, "method": "PUT"}``: answer the next matching requests so;
  ``POST /_test/clear-faults``: no more;
- ``POST /_test/concurrent-writes`` ``{"count": 1}``: after each of the next GETs of an object, another writer
  changes it (its resourceVersion moves on), so the PUT based on that GET conflicts;
- ``GET /_test/log``: ``[[method, path, status], ...]`` of every API request so far.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = re.compile(r"^/apis/serving\.kserve\.io/v1beta1/namespaces/([^/]+)/inferenceservices/([^/?]+)$")
REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 500: "InternalError",
           503: "ServiceUnavailable"}


class State:
    def __init__(self, token: str):
        self.token = token
        self.objects: dict[tuple[str, str], dict] = {}
        self.faults: list[dict] = []
        self.concurrent_writes = 0
        self.log: list[list] = []
        self.lock = threading.Lock()


def status_body(code: int, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": REASONS.get(code, "Unknown"), "code": code}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence per-request lines
        pass

    def _reply(self, code: int, body: object) -> None:
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/_test/log":
            with self.state.lock:
                return self._reply(200, self.state.log)
        self._api("GET", None)

    def do_PUT(self) -> None:  # noqa: N802
        self._api("PUT", self._body())

    def do_POST(self) -> None:  # noqa: N802
        body, state = self._body(), self.state
        with state.lock:
            if self.path == "/_test/objects":
                body["metadata"] |= {"resourceVersion": "1", "generation": 1}
                state.objects[(body["metadata"]["namespace"], body["metadata"]["name"])] = body
            elif self.path == "/_test/faults":
                state.faults += [{"status": body["status"], "method": body.get("method")}] * body.get("count", 1)
            elif self.path == "/_test/clear-faults":
                state.faults.clear()
            elif self.path == "/_test/concurrent-writes":
                state.concurrent_writes += body.get("count", 1)
            else:
                return self._reply(404, status_body(404, f"no test control {self.path}"))
        self._reply(200, {})

    def _api(self, method: str, body: dict | None) -> None:
        state = self.state
        with state.lock:
            code, reply = self._answer(method, body)
            state.log.append([method, self.path, code])
        self._reply(code, reply)

    def _answer(self, method: str, body: dict | None) -> tuple[int, dict]:
        state = self.state
        if self.headers.get("Authorization") != f"Bearer {state.token}":
            return 401, status_body(401, "Unauthorized")
        fault = next((f for f in state.faults if f["method"] in (None, method)), None)
        if fault is not None:
            state.faults.remove(fault)
            return fault["status"], status_body(fault["status"], "injected fault")
        match = PATH.match(self.path.split("?")[0])
        if match is None:
            return 404, status_body(404, "the server could not find the requested resource")
        key = match.groups()
        current = state.objects.get(key)
        if current is None:
            return 404, status_body(404, f'inferenceservices.serving.kserve.io "{key[1]}" not found')
        if method == "GET":
            reply = json.loads(json.dumps(current))
            if state.concurrent_writes:
                state.concurrent_writes -= 1
                self._store(key, current | {"metadata": current["metadata"] | {"labels": {"touched": "yes"}}})
            return 200, reply
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return 409, status_body(409, f'Operation cannot be fulfilled on inferenceservices.serving.kserve.io '
                                         f'"{key[1]}": the object has been modified; please apply your changes to '
                                         "the latest version and try again")
        return 200, self._store(key, body)

    def _store(self, key: tuple[str, str], obj: dict) -> dict:
        metadata = obj["metadata"] | {"resourceVersion": str(int(obj["metadata"]["resourceVersion"]) + 1),
                                      "generation": obj["metadata"].get("generation", 1) + 1}
        self.state.objects[key] = obj | {"metadata": metadata}
        return self.state.objects[key]


def main(port: int, token: str) -> None:
    Handler.state = State(token)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
