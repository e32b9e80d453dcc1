"""The gRPC API: open inference protocol V2 (the GRPCInferenceService of kserve's protobuf), on grpc.aio.

The bearer token, when set, is checked by :class:`BearerAuth` on every method but ServerLive and ServerReady;
the model repository methods answer UNIMPLEMENTED unless the extension is enabled.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

import grpc
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pb_grpc

from mavias.ops.serve.metrics import REQUESTS
from mavias.ops.serve.model import INLINE_BYTES, NotReady, OnnxClassifier, Prediction
from mavias.ops.serve.rest import server_metadata
from mavias.ops.serve.tensors import InputTensor, RequestError, v2_batch

log = logging.getLogger(__name__)

SERVICE = "/inference.GRPCInferenceService/"
PUBLIC_METHODS = {SERVICE + "ServerLive", SERVICE + "ServerReady"}
OUTPUTS = ("logits", "label")


class BearerAuth(grpc.aio.ServerInterceptor):
    def __init__(self, token: str):
        self.expected = f"Bearer {token}".encode()

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        if details.method in PUBLIC_METHODS:
            return await continuation(details)
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(given.encode() if isinstance(given, str) else given, self.expected):
            return await continuation(details)
        REQUESTS.labels("-", "-", "unauthorized").inc()

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'")

        return grpc.unary_unary_rpc_method_handler(refuse)


def _tensor(item: Any, raw: bytes | None) -> InputTensor:
    shape = tuple(item.shape)
    if raw is not None:
        return InputTensor(item.name, item.datatype, shape, raw=raw)
    contents = item.contents
    data = contents.bytes_contents if item.datatype == "BYTES" else contents.fp32_contents  # read when parsed
    return InputTensor(item.name, item.datatype, shape, data=data, data_is_base64=False)


def request_tensors(request: pb.ModelInferRequest) -> list[InputTensor]:
    raws = list(request.raw_input_contents)
    if raws and len(raws) != len(request.inputs):
        raise RequestError(f"{len(request.inputs)} inputs but {len(raws)} raw_input_contents")
    return [_tensor(item, raws[i] if raws else None) for i, item in enumerate(request.inputs)]


def _labels_raw(labels: list[str]) -> bytes:
    encoded = [label.encode() for label in labels]
    return b"".join(len(item).to_bytes(4, "little") + item for item in encoded)


def _output(name: str, prediction: Prediction) -> tuple[Any, bytes]:
    """One output's metadata and its raw contents."""
    if name == "logits":
        logits = prediction.logits.astype("<f4", copy=False)
        return pb.ModelInferResponse.InferOutputTensor(name=name, datatype="FP32", shape=logits.shape), \
            logits.tobytes()
    return pb.ModelInferResponse.InferOutputTensor(name=name, datatype="BYTES", shape=(len(prediction.labels),)), \
        _labels_raw(prediction.labels)


def infer_response(model: OnnxClassifier, prediction: Prediction, request: pb.ModelInferRequest) -> Any:
    wanted = [o.name for o in request.outputs] or OUTPUTS
    unknown = [name for name in wanted if name not in OUTPUTS]
    if unknown:
        raise RequestError(f"unknown output {unknown[0][:100]!r}; this model's outputs are {list(OUTPUTS)}")
    outputs, contents = zip(*(_output(name, prediction) for name in wanted))
    return pb.ModelInferResponse(model_name=model.name, model_version=prediction.version, id=request.id,
                                 outputs=outputs, raw_output_contents=contents)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, model: OnnxClassifier, *, repository: bool):
        self.model, self.repository = model, repository

    async def _abort(self, context: grpc.aio.ServicerContext, err: Exception) -> None:
        if isinstance(err, RequestError):
            code = grpc.StatusCode.NOT_FOUND if err.status == 404 else grpc.StatusCode.INVALID_ARGUMENT
            await context.abort(code, str(err))
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"not ready: {err}")

    def _model(self, name: str) -> OnnxClassifier:
        if name != self.model.name:
            raise RequestError(f"model {name[:100]!r} not found; this server serves {self.model.name!r}", 404)
        return self.model

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.model.ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        try:
            return pb.ModelReadyResponse(ready=self._model(request.name).ready)
        except RequestError as err:
            await self._abort(context, err)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return pb.ServerMetadataResponse(**server_metadata(self.repository))

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        try:
            inputs, outputs = self._model(request.name).io_metadata()
        except (RequestError, NotReady) as err:
            await self._abort(context, err)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(name=self.model.name, versions=[self.model.slot.current.version],
                                        platform="onnxruntime_onnx", inputs=[tensor(**i) for i in inputs],
                                        outputs=[tensor(**o) for o in outputs])

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        started = time.perf_counter()
        try:
            model = self._model(request.model_name)
            async with model.admission():
                tensors = request_tensors(request)
                small = request.ByteSize() <= INLINE_BYTES and all(t.datatype != "BYTES" for t in tensors)
                return await model.infer(lambda served: v2_batch(tensors, served, model.max_batch),
                                         lambda prediction: infer_response(model, prediction, request),
                                         inline=small, started=started)
        except (RequestError, NotReady) as err:
            await self._abort(context, err)
        except Exception:  # noqa: BLE001 - logged with its stack by the model; the client gets no internals
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        await self._repository(request.model_name, context, online=True)
        return pb.RepositoryModelLoadResponse(model_name=request.model_name, isLoaded=True)

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        await self._repository(request.model_name, context, online=False)
        return pb.RepositoryModelUnloadResponse(model_name=request.model_name, isUnloaded=True)

    async def _repository(self, name: str, context: Any, *, online: bool) -> None:
        if not self.repository:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the model repository extension is off; start the "
                                "server with --enable-model-repository")
        try:
            self._model(name).online = online
        except RequestError as err:
            await self._abort(context, err)
        log.warning("model_loaded_by_api" if online else "model_unloaded_by_api", extra={"model": name})


def create_server(model: OnnxClassifier, *, host: str, port: int, max_bytes: int, token: str | None,
                  repository: bool, max_rpcs: int) -> grpc.aio.Server:
    """``max_rpcs``: RPCs held at once (each holds its received message); more are refused RESOURCE_EXHAUSTED."""
    options = [("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_bytes)]
    server = grpc.aio.server(interceptors=[BearerAuth(token)] if token else [], options=options,
                             maximum_concurrent_rpcs=max_rpcs)
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceServicer(model, repository=repository), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot listen on {address} (gRPC)")
    return server

