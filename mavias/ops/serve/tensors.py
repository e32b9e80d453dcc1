"""Requests of the open inference protocol, parsed and checked into one float32 batch (no torch, no web framework).

V2 input ``image`` (the ONNX input's name) is either FP32 ``[N, 3, H, W]`` already preprocessed, or BYTES ``[N]``
(or ``[N, 1]``) of encoded images, preprocessed as the model card says. BYTES come raw with the binary data
extension and over gRPC, and base64-encoded in JSON (JSON strings cannot carry arbitrary bytes). V1:
``{"instances": [[3][H][W] nested lists | {"b64": "<encoded image>"}, ...]}``.

Counts and sizes are checked before anything is decoded or allocated; every malformed request raises
:class:`RequestError` with a one-line reason (HTTP 4xx, gRPC INVALID_ARGUMENT).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mavias.ops.serve.preprocess import ImageError, preprocess_encoded
from mavias.ops.serve.versions import ServedVersion

Dim = Annotated[int, Field(ge=0, strict=True)]


class RequestError(ValueError):
    """The client's mistake: ``status`` (400, 404, 413, ...) and a one-line reason."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class V2Input(BaseModel):
    """One input tensor of a V2 request (JSON form)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[Dim] = Field(max_length=8)
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class V2Output(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    parameters: dict[str, Any] | None = None


class V2Request(BaseModel):
    """A V2 inference request (the JSON part, before the binary data of the binary extension)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[V2Input] = Field(min_length=1, max_length=16)
    outputs: list[V2Output] | None = None


class V1Request(BaseModel):
    """A V1 request: instances are [3][H][W] nested lists of numbers or ``{"b64": "<encoded image>"}``."""

    instances: list[Any] = Field(min_length=1)


@dataclass(frozen=True)
class InputTensor:
    """One V2 input, whatever the transport: ``raw`` bytes (binary extension, gRPC raw contents) or ``data``."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | None = None
    data: Any = None  # JSON values (BYTES: base64 strings), or gRPC typed contents (BYTES: raw bytes)
    data_is_base64: bool = True


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(map(str, first["loc"])) or "body"
    return f"{where}: {first['msg']}"


def parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise RequestError(f"the body is not valid JSON: {err}") from None


def parse_v2_body(body: bytes, header_length: str | None) -> tuple[V2Request, list[InputTensor]]:
    """A REST V2 body: JSON, or with ``Inference-Header-Content-Length`` a JSON header then binary tensor data."""
    binary = b""
    if header_length is not None:
        if not (header_length.isascii() and header_length.isdigit()) or not 0 < int(header_length) <= len(body):
            raise RequestError(f"Inference-Header-Content-Length {header_length[:20]!r} must be a length between 1 "
                               f"and the body's {len(body)} bytes")
        body, binary = body[: int(header_length)], body[int(header_length) :]
    try:
        request = V2Request.model_validate(parse_json(body))
    except ValidationError as err:
        raise RequestError(f"not a V2 inference request: {_first_error(err)}") from None
    return request, _with_binary_data(request.inputs, binary)


def _with_binary_data(inputs: list[V2Input], binary: bytes) -> list[InputTensor]:
    tensors, offset = [], 0
    for item in inputs:
        size = (item.parameters or {}).get("binary_data_size")
        if size is None:
            if item.data is None:
                raise RequestError(f"input {item.name!r} has neither data nor parameters.binary_data_size")
            tensors.append(InputTensor(item.name, item.datatype, tuple(item.shape), data=item.data))
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
            raise RequestError(f"input {item.name!r}: binary_data_size {size!r} does not fit the {len(binary)} bytes "
                               f"of binary data after the JSON header")
        tensors.append(InputTensor(item.name, item.datatype, tuple(item.shape), raw=binary[offset : offset + size]))
        offset += size
    if offset != len(binary):
        raise RequestError(f"the binary data holds {len(binary)} bytes, the inputs' binary_data_size add up to "
                           f"{offset}")
    return tensors


def v2_batch(tensors: list[InputTensor], served: ServedVersion, max_batch: int) -> np.ndarray:
    """The preprocessed float32 batch of a V2 request's inputs."""
    if len(tensors) != 1:
        raise RequestError(f"expected one input named {served.input_name!r}, got {len(tensors)}")
    (tensor,) = tensors
    if tensor.name != served.input_name:
        raise RequestError(f"unknown input {tensor.name!r}; this model's input is {served.input_name!r}")
    if tensor.datatype == "FP32":
        _check_image_shape(tensor.shape, served, max_batch)
        return _finite(_fp32(tensor, math.prod(tensor.shape)).reshape(tensor.shape))
    if tensor.datatype == "BYTES":
        if len(tensor.shape) not in (1, 2) or (len(tensor.shape) == 2 and tensor.shape[1] != 1):
            raise RequestError(f"encoded images take shape [N] or [N, 1], got {list(tensor.shape)}")
        _check_count(tensor.shape[0], max_batch)
        return images(_bytes_elements(tensor, tensor.shape[0]), served)
    raise RequestError(f"datatype {tensor.datatype[:20]!r} is not accepted: send FP32 images or BYTES encoded images")


def _check_count(count: int, max_batch: int) -> None:
    if count < 1:
        raise RequestError("the batch is empty: send at least one image")
    if count > max_batch:
        raise RequestError(f"batch of {count} exceeds the limit of {max_batch}; split the request")


def _check_image_shape(shape: tuple[int, ...], served: ServedVersion, max_batch: int) -> None:
    if len(shape) != 4 or tuple(shape[1:]) != served.image_shape:
        expected = ", ".join(map(str, served.image_shape))
        raise RequestError(f"input shape {list(shape)[:8]} does not match [N, {expected}]; send preprocessed float32 "
                           f"images (see the model card's preprocessing) or encoded images as BYTES")
    _check_count(shape[0], max_batch)


def _finite(batch: np.ndarray) -> np.ndarray:
    if not np.isfinite(batch).all():
        raise RequestError("the input holds NaN or infinite values; send finite numbers")
    return batch


def _fp32(tensor: InputTensor, count: int) -> np.ndarray:
    """The FP32 tensor's ``count`` values as a flat array."""
    if tensor.raw is not None:
        if len(tensor.raw) != 4 * count:
            raise RequestError(f"input {tensor.name!r}: {len(tensor.raw)} bytes of FP32 data, shape "
                               f"{list(tensor.shape)} needs {4 * count}")
        return np.frombuffer(tensor.raw, dtype="<f4")
    array = _numbers(tensor.data, f"input {tensor.name!r}")
    if array.size != count:
        raise RequestError(f"input {tensor.name!r}: {array.size} values, shape {list(tensor.shape)} needs {count}")
    return array.reshape(-1)


def _numbers(data: Any, what: str) -> np.ndarray:
    """Nested lists of numbers (not booleans, strings or nulls) as float32."""
    try:
        array = np.asarray(data)
    except (ValueError, TypeError, OverflowError) as err:
        raise RequestError(f"{what}: data is not a regular array of numbers ({str(err)[:120]})") from None
    if array.dtype.kind not in "iuf":
        raise RequestError(f"{what}: data must be numbers for datatype FP32 (got {array.dtype.kind!r} values)")
    with np.errstate(over="ignore"):
        return array.astype(np.float32)


def _bytes_elements(tensor: InputTensor, count: int) -> list[bytes]:
    if tensor.raw is not None:
        return unpack_bytes(tensor.raw, count, tensor.name)
    items = _flat(tensor.data)
    if len(items) != count:
        raise RequestError(f"input {tensor.name!r}: {len(items)} values, shape {list(tensor.shape)} needs {count}")
    if not tensor.data_is_base64:
        return [bytes(item) for item in items]
    return [_base64(item, tensor.name) for item in items]


def _flat(data: Any) -> list[Any]:
    """Nested lists' leaves in order, without recursion (JSON nests a thousand levels in a few bytes)."""
    leaves, pending = [], [iter(data)]
    while pending:
        for item in pending[-1]:
            if isinstance(item, list):
                pending.append(iter(item))
                break
            leaves.append(item)
        else:
            pending.pop()
    return leaves


def _base64(item: Any, name: str) -> bytes:
    if isinstance(item, dict) and set(item) == {"b64"}:
        item = item["b64"]
    if not isinstance(item, str) or not item.isascii():
        raise RequestError(f"input {name!r}: BYTES in JSON must be base64 strings of encoded images (or send them raw "
                           "with the binary data extension)")
    try:
        return base64.b64decode(item, validate=True)
    except (binascii.Error, ValueError) as err:
        raise RequestError(f"input {name!r}: a BYTES value is not base64 ({err})") from None


def unpack_bytes(raw: bytes, count: int, name: str) -> list[bytes]:
    """The binary form of a BYTES tensor: each element a 4-byte little-endian length, then its bytes."""
    items, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise RequestError(f"input {name!r}: BYTES data ends inside an element's 4-byte length")
        (size,) = struct.unpack_from("<I", raw, offset)
        if offset + 4 + size > len(raw):
            raise RequestError(f"input {name!r}: a BYTES element of {size} bytes overruns the data")
        items.append(raw[offset + 4 : offset + 4 + size])
        offset += 4 + size
        if len(items) > count:
            break
    if len(items) != count:
        raise RequestError(f"input {name!r}: the BYTES data holds {len(items)}{'+' if offset < len(raw) else ''} "
                           f"elements, shape says {count}")
    return items


def images(encoded: list[bytes], served: ServedVersion) -> np.ndarray:
    try:
        return preprocess_encoded(encoded, served.preprocessing)
    except ImageError as err:
        raise RequestError(str(err)) from err


def v1_batch(body: bytes, served: ServedVersion, max_batch: int) -> np.ndarray:
    """The preprocessed float32 batch of a V1 ``{"instances": [...]}`` body."""
    try:
        request = V1Request.model_validate(parse_json(body))
    except ValidationError as err:
        raise RequestError(f'V1 requests are {{"instances": [...]}} with at least one instance: '
                           f"{_first_error(err)}") from None
    _check_count(len(request.instances), max_batch)
    encoded = [item for item in request.instances if isinstance(item, dict)]
    if encoded:
        if len(encoded) != len(request.instances):
            raise RequestError("instances mix encoded images and arrays; send one kind per request")
        return images([_base64(item, "instances") for item in encoded], served)
    array = _numbers(request.instances, "instances")
    _check_image_shape(array.shape, served, max_batch)
    return _finite(array)
