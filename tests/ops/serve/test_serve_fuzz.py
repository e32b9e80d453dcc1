"""Property-based fuzzing of a real server: schemathesis from the server's own OpenAPI schema, then hypothesis
strategies for tensors and images. Over 2,000 generated requests, no 5xx, and the server alive and right after."""

from __future__ import annotations

import io
import json
import struct

import hypothesis.strategies as st
import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from PIL import Image

from tests.ops.serve.conftest import get, post, v2_body

pytestmark = pytest.mark.slow

SCHEMA_EXAMPLES, TENSOR_EXAMPLES, IMAGE_EXAMPLES = 1_500, 300, 300
FUZZ_SETTINGS = settings(deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def server(request, versions, tmp_path_factory):
    from mavias.ops.serve.launch import running_server

    log_path = tmp_path_factory.mktemp("fuzz") / "server.log"
    with running_server(["--model-dir", str(versions["v1"]), "--name", "scenes", "--max-batch", "8"],
                        log_path) as running:
        yield running


def assert_alive_and_right(server) -> None:
    assert get(server, "/v2/health/live")[0] == 200
    status, reply = post(server, "/v2/models/scenes/infer", v2_body())
    assert status == 200 and reply["outputs"][0]["shape"] == [1, 3]
    assert "Traceback" not in server.log_path.read_text()


def test_schemathesis_from_the_servers_openapi_schema(server):
    schema = schemathesis.openapi.from_url(f"http://{server.http_url}/openapi.json")
    statuses: list[int] = []

    @settings(FUZZ_SETTINGS, max_examples=SCHEMA_EXAMPLES)
    @given(case=schema.as_strategy())
    def fuzz(case) -> None:
        response = case.call(timeout=30)
        statuses.append(response.status_code)
        assert response.status_code < 500, (case.method, case.formatted_path, case.body, response.text[:300])

    fuzz()
    assert len(statuses) >= SCHEMA_EXAMPLES and any(400 <= s < 500 for s in statuses)
    assert_alive_and_right(server)


def encoded(data: bytes) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1],
                                     "parameters": {"binary_data_size": len(data) + 4}}]}).encode()
    return header + struct.pack("<I", len(data)) + data, {"Inference-Header-Content-Length": str(len(header))}


numbers = st.one_of(st.floats(width=32), st.integers(-2**70, 2**70), st.booleans(), st.text(max_size=3), st.none())
shapes = st.lists(st.one_of(st.integers(-2, 20), st.sampled_from([2**31, 2**63 - 1, 2**64])), max_size=5)


@st.composite
def tensor_requests(draw) -> tuple[bytes, dict[str, str]]:
    """V2 requests around the valid one: shapes, datatypes, data and binary lengths slightly or wildly off."""
    shape = draw(st.one_of(st.just([draw(st.integers(0, 3)), 3, 16, 16]), shapes))
    datatype = draw(st.sampled_from(["FP32", "FP32", "BYTES", "FP16", "INT64", "fp32", ""]))
    name = draw(st.sampled_from(["image", "image", "pixels", ""]))
    if draw(st.booleans()):
        size = int(np.prod(np.clip(shape, 0, 1000))) if shape else 1
        data = draw(st.lists(numbers, min_size=max(0, min(size, 2000) - 1), max_size=min(size, 2000) + 1))
        body = json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": data}]}).encode()
        return body, {}
    raw = draw(st.binary(max_size=64)) + bytes(draw(st.sampled_from([0, 3072, 6144, 3071])))
    declared = draw(st.sampled_from([len(raw), len(raw) + 1, max(0, len(raw) - 1), 0]))
    header = json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape,
                                     "parameters": {"binary_data_size": declared}}]}).encode()
    header_length = draw(st.sampled_from([len(header), len(header) + 1, len(header) - 1]))
    return header + raw, {"Inference-Header-Content-Length": str(header_length)}


def test_hypothesis_tensors(server):
    @settings(FUZZ_SETTINGS, max_examples=TENSOR_EXAMPLES)
    @given(request=tensor_requests())
    def fuzz(request) -> None:
        status, reply = post(server, "/v2/models/scenes/infer", *request)
        statuses.append(status)
        assert status < 500, reply

    statuses: list[int] = []
    fuzz()
    assert len(statuses) >= TENSOR_EXAMPLES and any(400 <= s < 500 for s in statuses)
    assert_alive_and_right(server)


@st.composite
def images(draw) -> bytes:
    """Encoded images of every size, mode and format, then maybe truncated or with bytes flipped."""
    width, height = draw(st.integers(1, 300)), draw(st.integers(1, 300))
    mode = draw(st.sampled_from(["RGB", "L", "RGBA", "P", "1", "I", "F", "CMYK"]))
    fmt = draw(st.sampled_from(["PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP"]))
    image = Image.new(mode, (width, height), color=draw(st.integers(0, 255)))
    buffer = io.BytesIO()
    try:
        image.save(buffer, format=fmt)
    except (OSError, ValueError, KeyError):
        image.convert("RGB").save(buffer, format=fmt)
    data = bytearray(buffer.getvalue())
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    for position in draw(st.lists(st.integers(0, max(0, len(data) - 1)), max_size=4)):
        if data:
            data[position] ^= 0xFF
    return bytes(data)


def test_hypothesis_images(server):
    @settings(FUZZ_SETTINGS, max_examples=IMAGE_EXAMPLES)
    @given(data=images())
    def fuzz(data) -> None:
        status, reply = post(server, "/v2/models/scenes/infer", *encoded(data))
        statuses.append(status)
        assert status in (200, 400), reply

    statuses: list[int] = []
    fuzz()
    assert len(statuses) >= IMAGE_EXAMPLES and {200, 400} <= set(statuses)
    assert_alive_and_right(server)
