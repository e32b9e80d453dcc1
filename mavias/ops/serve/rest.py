"""The REST API: open inference protocol V2 (with the binary data extension) and V1, health, metrics (FastAPI).

Bodies are read raw (never parsed by the framework on the event loop) and only after the model admits the
request; sizes and the bearer token are checked by :class:`RequestGuard` before anything is read.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from importlib import metadata
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from prometheus_client import REGISTRY, exposition

from mavias.ops.serve.metrics import REQUESTS
from mavias.ops.serve.model import INLINE_BYTES, NotReady, OnnxClassifier, Prediction
from mavias.ops.serve.tensors import (
    RequestError,
    V1Request,
    V2Request,
    parse_v2_body,
    v1_batch,
    v2_batch,
)

log = logging.getLogger(__name__)

PUBLIC_PATHS = {"/", "/v2/health/live", "/v2/health/ready"}  # liveness and readiness: no token needed
BINARY_HEADER = "inference-header-content-length"


def server_metadata(repository: bool) -> dict[str, Any]:
    """The open inference protocol's server metadata (the serving image runs from source: no package version)."""
    try:
        version = metadata.version("mavias")
    except metadata.PackageNotFoundError:
        version = "source"
    extensions = ["binary_tensor_data", *(["model_repository"] if repository else [])]
    return {"name": "mavias", "version": version, "extensions": extensions}


class RequestGuard:
    """ASGI middleware: the bearer token (every path but liveness/readiness), then the body's declared size:
    unknown length 411, over ``max_bytes`` 413, a JSON body (no binary extension) over ``max_json_bytes`` 413."""

    def __init__(self, app: Any, *, max_bytes: int, max_json_bytes: int, token: str | None):
        self.app, self.max_bytes, self.max_json_bytes = app, max_bytes, max_json_bytes
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.expected is not None and scope["path"] not in PUBLIC_PATHS and \
                not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            REQUESTS.labels("-", "-", "unauthorized").inc()
            return await reply(send, 401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'",
                               [(b"www-authenticate", b"Bearer")])
        if scope["method"] == "POST":
            problem = self._size_problem(headers, v1=scope["path"].endswith(":predict"))
            if problem is not None:
                return await reply(send, *problem)
        return await self.app(scope, receive, send)

    def _size_problem(self, headers: dict[bytes, bytes], *, v1: bool) -> tuple[int, str] | None:
        length = headers.get(b"content-length", b"")
        if not length.isdigit():
            return 411, "send a Content-Length header; chunked request bodies are not accepted"
        if int(length) > self.max_bytes:
            return 413, (f"request body of {int(length)} bytes exceeds the limit of {self.max_bytes}; send smaller "
                         "batches (or use gRPC)")
        json_part = headers.get(BINARY_HEADER.encode(), b"")  # V2's JSON header ahead of binary data; V1 has none
        json_bytes = int(json_part) if json_part.isdigit() and not v1 else int(length)
        if json_bytes > self.max_json_bytes:
            return 413, (f"JSON body of {json_bytes} bytes exceeds the JSON limit of {self.max_json_bytes}; send "
                         "tensors with the binary data extension (Inference-Header-Content-Length) or over gRPC")
        return None


async def reply(send: Any, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def _json(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY), status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def v2_response(model: OnnxClassifier, prediction: Prediction, request: V2Request) -> Response:
    outputs = {"logits": {"name": "logits", "datatype": "FP32", "shape": list(prediction.logits.shape),
                          "data": prediction.logits.reshape(-1)},
               "label": {"name": "label", "datatype": "BYTES", "shape": [len(prediction.labels)],
                         "data": prediction.labels}}
    wanted = [o.name for o in request.outputs or []] or list(outputs)
    unknown = [name for name in wanted if name not in outputs]
    if unknown:
        raise RequestError(f"unknown output {unknown[0]!r}; this model's outputs are {list(outputs)}")
    return _json({"model_name": model.name, "model_version": prediction.version, "id": request.id or "",
                  "outputs": [outputs[name] for name in wanted]})


def v1_response(prediction: Prediction) -> Response:
    return _json({"model_version": prediction.version, "predictions": [
        {"logits": row, "label": label} for row, label in zip(prediction.logits, prediction.labels)]})


class Routes:
    """The handlers, bound to the one model this server serves."""

    def __init__(self, model: OnnxClassifier, *, repository: bool):
        self.model, self.repository = model, repository

    def _model(self, name: str) -> OnnxClassifier:
        if name != self.model.name:
            raise RequestError(f"model {name[:100]!r} not found; this server serves {self.model.name!r}", 404)
        return self.model

    async def live(self) -> Response:
        return _json({"live": True, "status": "alive"})

    async def ready(self) -> Response:
        reason = self.model.not_ready_reason()
        return _json({"ready": True}) if reason is None else _json({"ready": False, "error": reason}, 503)

    async def server_metadata(self) -> Response:
        return _json(server_metadata(self.repository))

    async def model_metadata(self, model_name: str) -> Response:
        model = self._model(model_name)
        inputs, outputs = model.io_metadata()
        return _json({"name": model.name, "versions": [model.slot.current.version], "platform": "onnxruntime_onnx",
                      "inputs": inputs, "outputs": outputs})

    async def model_ready(self, model_name: str) -> Response:
        model = self._model(model_name)
        reason = model.not_ready_reason()
        body = {"name": model.name, "ready": reason is None} | ({"error": reason} if reason else {})
        return _json(body, 200 if reason is None else 503)

    async def infer(self, model_name: str, request: Request) -> Response:
        started = time.perf_counter()
        model = self._model(model_name)
        async with model.admission():
            body = await request.body()
            header_length = request.headers.get(BINARY_HEADER)
            parsed: list[V2Request] = []

            def parse(served: Any) -> Any:
                v2_request, tensors = parse_v2_body(body, header_length)
                parsed.append(v2_request)
                return v2_batch(tensors, served, model.max_batch)

            return await model.infer(parse, lambda prediction: v2_response(model, prediction, parsed[0]),
                                     inline=parse_inline(body, b'"BYTES"'), started=started)

    async def models(self) -> Response:
        return _json({"models": [self.model.name]})

    async def predict(self, model_name: str, request: Request) -> Response:
        started = time.perf_counter()
        model = self._model(model_name)
        async with model.admission():
            body = await request.body()
            return await model.infer(lambda served: v1_batch(body, served, model.max_batch), v1_response,
                                     inline=parse_inline(body, b'"b64"'), started=started)

    async def metrics(self, request: Request) -> Response:
        encoder, content_type = exposition.choose_encoder(request.headers.get("accept"))
        return Response(content=encoder(REGISTRY), headers={"content-type": content_type})

    async def repository_index(self) -> Response:
        state = "READY" if self.model.ready else "UNAVAILABLE"
        version = self.model.slot.current.version if self.model.slot.current else ""
        return _json([{"name": self.model.name, "version": version, "state": state}])

    async def load(self, model_name: str) -> Response:
        self._model(model_name).online = True
        log.warning("model_loaded_by_api", extra={"model": model_name})
        return _json({"name": model_name, "load": True})

    async def unload(self, model_name: str) -> Response:
        self._model(model_name).online = False
        log.warning("model_unloaded_by_api", extra={"model": model_name})
        return _json({"name": model_name, "unload": True})


def parse_inline(body: bytes, images_marker: bytes) -> bool:
    """Parse on the event loop: a small body without encoded images (no ``images_marker``, nor any ``\\u`` escape
    that JSON could spell it with)."""
    return len(body) <= INLINE_BYTES and images_marker not in body and b"\\u" not in body


def _body_doc(model: type, description: str) -> dict[str, Any]:
    return {"requestBody": {"required": True, "description": description, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, plus the request bodies the inference routes read themselves."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (V2Request, V1Request):
            document = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(document.pop("$defs", {}))
            components[model.__name__] = document
        app.openapi_schema = schema
    return app.openapi_schema


async def _request_error(request: Request, err: Exception) -> Response:
    return _error(getattr(err, "status", 400), str(err))


async def _validation_error(request: Request, err: Exception) -> Response:
    first = err.errors()[0] if isinstance(err, RequestValidationError) and err.errors() else {}
    return _error(422, f"{'.'.join(map(str, first.get('loc', ())))}: {first.get('msg', 'invalid request')}")


async def _not_ready(request: Request, err: Exception) -> Response:
    return _error(503, f"not ready: {err}")


async def _internal_error(request: Request, err: Exception) -> Response:
    log.error("request_failed", exc_info=err, extra={"path": request.url.path})
    return _error(500, "internal error; see the server log")


def create_app(model: OnnxClassifier, *, repository: bool, max_bytes: int, max_json_bytes: int,
               token: str | None) -> Any:
    """The ASGI application: the routes behind :class:`RequestGuard`."""
    app = FastAPI(title="mavias serve", version=server_metadata(repository)["version"], docs_url=None,
                  redoc_url=None)
    routes = Routes(model, repository=repository)
    add = app.add_api_route
    for path in ("/", "/v2/health/live"):
        add(path, routes.live, methods=["GET"])
    add("/v2/health/ready", routes.ready, methods=["GET"])
    add("/v2", routes.server_metadata, methods=["GET"])
    add("/v2/models/{model_name}", routes.model_metadata, methods=["GET"])
    add("/v2/models/{model_name}/ready", routes.model_ready, methods=["GET"])
    add("/v2/models/{model_name}/infer", routes.infer, methods=["POST"],
        openapi_extra=_body_doc(V2Request, "JSON, or a JSON header of Inference-Header-Content-Length bytes then "
                                           "the binary tensor data"))
    add("/v1/models", routes.models, methods=["GET"])
    add("/v1/models/{model_name}", routes.model_ready, methods=["GET"])
    add("/v1/models/{model_name}:predict", routes.predict, methods=["POST"],
        openapi_extra=_body_doc(V1Request, "instances: [3][H][W] arrays or {\"b64\": encoded image}"))
    add("/metrics", routes.metrics, methods=["GET"])
    if repository:
        add("/v2/repository/index", routes.repository_index, methods=["POST"])
        add("/v2/repository/models/{model_name}/load", routes.load, methods=["POST"])
        add("/v2/repository/models/{model_name}/unload", routes.unload, methods=["POST"])
    app.openapi = lambda: _openapi(app)
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(NotReady, _not_ready)
    app.add_exception_handler(Exception, _internal_error)
    return RequestGuard(app, max_bytes=max_bytes, max_json_bytes=max_json_bytes, token=token)
