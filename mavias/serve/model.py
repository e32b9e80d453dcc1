"""The kserve model: open inference protocol V2 (REST and gRPC) and V1 requests, validated before ONNX Runtime.

V2 input ``image`` (the ONNX input's name) is either FP32 ``[N, 3, H, W]`` already preprocessed, or BYTES ``[N]``
of encoded images that are preprocessed as the model card says. Outputs: ``logits`` FP32 ``[N, classes]`` and
``label`` BYTES ``[N]``. V1: ``{"instances": [[3][H][W] nested lists | {"b64": "<encoded image>"}, ...]}``.
Every malformed request is refused with ``InvalidInput`` (HTTP 400, gRPC INVALID_ARGUMENT) saying what was wrong.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import struct
import time
import uuid
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InvalidInput, ModelNotReady
from kserve.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse
from prometheus_client import Counter, Gauge, Histogram

from mavias.serve.preprocess import ImageError, preprocess_encoded
from mavias.serve.versions import ModelSlot, ServedVersion

log = logging.getLogger(__name__)

REQUESTS = Counter("mavias_serve_requests_total", "inference requests", ["model", "version", "outcome"])
LATENCY = Histogram("mavias_serve_request_seconds", "inference latency (preprocessing + ONNX Runtime)",
                    ["model", "version"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
LOADS = Counter("mavias_serve_model_loads_total", "versions loaded and verified", ["model"])
LOAD_FAILURES = Counter("mavias_serve_model_load_failures_total", "versions refused (load or verification)", ["model"])
SERVING = Gauge("mavias_serve_version_info", "1 for the version being served", ["model", "version"])


INLINE_BATCH = 4  # up to this many images ONNX Runtime runs on the event loop: a thread hop costs more than it


class OnnxClassifier(Model):
    def __init__(self, name: str, *, max_batch: int):
        super().__init__(name)
        self.max_batch = max_batch
        self.slot = ModelSlot(self._loaded, self._refused)

    def _loaded(self, served: ServedVersion, previous: ServedVersion | None, seconds: float) -> None:
        if previous is not None:
            SERVING.labels(self.name, previous.version).set(0)
        SERVING.labels(self.name, served.version).set(1)
        LOADS.labels(self.name).inc()
        self.ready = True
        log.info("model_loaded", extra={
            "model": self.name, "version": served.version, "seconds": round(seconds, 3),
            "sha256": served.card["onnx"]["sha256"], "providers": served.session.get_providers()})

    def _refused(self, version: str, reason: str) -> None:
        LOAD_FAILURES.labels(self.name).inc()
        serving = self.slot.current.version if self.slot.current else None
        log.error("model_refused", extra={"model": self.name, "version": version, "reason": reason, "serving": serving})

    def load(self) -> bool:
        """kserve calls this for a model that is not ready: loading is the follower's job, so only report."""
        return self.ready

    async def predict(self, payload: InferRequest | dict, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None) -> InferResponse | dict:
        served = self.slot.current
        if served is None:
            raise ModelNotReady(self.name, "no verified model version is loaded yet")
        try:
            batch = v1_batch(payload, served) if isinstance(payload, dict) else v2_batch(payload, served)
            if len(batch) > self.max_batch:
                raise InvalidInput(f"batch of {len(batch)} exceeds the limit of {self.max_batch}; split the request")
        except InvalidInput:
            REQUESTS.labels(self.name, served.version, "invalid").inc()
            raise
        started = time.perf_counter()
        if len(batch) <= INLINE_BATCH:
            logits = served.run(batch)
        else:
            logits = await asyncio.get_running_loop().run_in_executor(None, served.run, batch)
        LATENCY.labels(self.name, served.version).observe(time.perf_counter() - started)
        REQUESTS.labels(self.name, served.version, "ok").inc()
        labels = [served.classes[i] for i in logits.argmax(1)]
        if isinstance(payload, dict):
            return {"predictions": [{"logits": row.tolist(), "label": label} for row, label in zip(logits, labels)],
                    "model_version": served.version}
        outputs = [InferOutput("logits", list(logits.shape), "FP32", logits),
                   InferOutput("label", [len(labels)], "BYTES", np.array(labels, dtype=np.object_))]
        return InferResponse(response_id=payload.id or uuid.uuid4().hex, model_name=self.name,
                             model_version=served.version, infer_outputs=outputs, from_grpc=payload.from_grpc)


def _images(encoded: list[bytes], served: ServedVersion) -> np.ndarray:
    try:
        return preprocess_encoded(encoded, served.preprocessing)
    except ImageError as err:
        raise InvalidInput(str(err)) from err


def _check_image_shape(shape: tuple[int, ...], served: ServedVersion) -> None:
    if len(shape) != 4 or tuple(shape[1:]) != served.image_shape:
        expected = ", ".join(map(str, served.image_shape))
        raise InvalidInput(f"input shape {list(shape)} does not match [N, {expected}]; send preprocessed float32 "
                           f"images (see the model card's preprocessing) or encoded images as BYTES")


def _input_array(tensor: InferInput, dtype: type, count: int) -> np.ndarray:
    """The tensor's data as a flat array, after checking that it holds exactly ``count`` elements."""
    raw = tensor._raw_data  # noqa: SLF001 - binary extension / gRPC raw contents; kserve offers no accessor
    if raw is not None and dtype is np.float32:
        if len(raw) != 4 * count:
            raise InvalidInput(f"input {tensor.name!r}: {len(raw)} bytes of FP32 data, shape {tensor.shape} needs "
                               f"{4 * count}")
        return np.frombuffer(raw, dtype=np.float32)
    try:
        array = tensor.as_numpy().reshape(-1) if raw is not None else np.asarray(tensor.data, dtype=dtype).reshape(-1)
    except (ValueError, TypeError, struct.error) as err:
        raise InvalidInput(f"input {tensor.name!r}: data does not fit datatype {tensor.datatype}: {err}") from err
    if array.size != count:
        raise InvalidInput(f"input {tensor.name!r}: {array.size} values, shape {tensor.shape} needs {count}")
    return array


def v2_batch(request: InferRequest, served: ServedVersion) -> np.ndarray:
    """The preprocessed float32 batch of a V2 request."""
    if len(request.inputs) != 1:
        raise InvalidInput(f"expected one input named {served.input_name!r}, got {len(request.inputs)}")
    (tensor,) = request.inputs
    if tensor.name != served.input_name:
        raise InvalidInput(f"unknown input {tensor.name!r}; this model's input is {served.input_name!r}")
    shape = tuple(tensor.shape)
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise InvalidInput(f"invalid shape {list(shape)}")
    count = int(np.prod(shape, dtype=np.int64))
    if tensor.datatype == "FP32":
        _check_image_shape(shape, served)
        return _input_array(tensor, np.float32, count).reshape(shape)
    if tensor.datatype == "BYTES":
        if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
            raise InvalidInput(f"encoded images take shape [N] or [N, 1], got {list(shape)}")
        encoded = [item if isinstance(item, bytes) else str(item).encode("latin-1")
                   for item in _input_array(tensor, np.object_, count)]
        return _images(encoded, served)
    raise InvalidInput(f"datatype {tensor.datatype} is not accepted: send FP32 images or BYTES encoded images")


def _v1_instance(instance: Any, served: ServedVersion) -> np.ndarray:
    if isinstance(instance, dict) and "b64" in instance:
        try:
            data = base64.b64decode(instance["b64"], validate=True)
        except (binascii.Error, TypeError, ValueError) as err:
            raise InvalidInput(f"instance's b64 is not base64: {err}") from err
        return _images([data], served)[0]
    try:
        array = np.asarray(instance, dtype=np.float32)
    except (ValueError, TypeError) as err:
        raise InvalidInput(f"an instance is neither {{'b64': ...}} nor a [3][H][W] array of numbers: {err}") from err
    _check_image_shape((1, *array.shape), served)
    return array


def v1_batch(payload: dict, served: ServedVersion) -> np.ndarray:
    instances = payload.get("instances")
    if not isinstance(instances, list) or not instances:
        raise InvalidInput('V1 requests are {"instances": [...]} with at least one instance')
    return np.stack([_v1_instance(instance, served) for instance in instances])
