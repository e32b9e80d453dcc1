"""Hostile and malformed input against a real server: image bombs, oversized batches, liveness under load, every
malformed request a 4xx in one line, BYTES as binary data and base64, metadata usable by tritonclient."""

from __future__ import annotations

import base64
import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from mavias.ops.serve.launch import serve_python
from mavias.tools.bench.serve import blank_png, bytes_request, smooth_png
from tests.ops.serve.conftest import get, metric, png, post, request, v2_body

pytestmark = pytest.mark.slow


@pytest.fixture
def server(start_server, versions):
    return start_server("--model-dir", str(versions["v1"]), "--name", "scenes")


def test_image_bombs_are_refused_from_their_headers(server):
    rss_before = psutil.Process(server.process.pid).memory_info().rss
    cases = [(blank_png((39_000_000, 1)), "exceeds 24000000 pixels"),  # ~40 KB, 39 Mpx
             (blank_png((20_000_000, 1)), "aspect ratio"),  # would resize to 16 x 320,000,000
             (blank_png((6_000, 6_000)), "exceeds 24000000 pixels"), (blank_png((25, 1)), "aspect ratio")]
    for data, message in cases:
        body, headers = bytes_request([data])
        status, reply = post(server, "/v2/models/scenes/infer", body, headers)
        assert status == 400 and message in reply["error"], (status, reply)
    four = blank_png((5_000, 4_000), "RGB")  # 20 Mpx each: 80 Mpx together, over the per-request budget
    body, headers = bytes_request([four] * 4)
    status, reply = post(server, "/v2/models/scenes/infer", body, headers)
    assert status == 400 and "per request" in reply["error"]
    grown = psutil.Process(server.process.pid).memory_info().rss - rss_before
    assert grown < 300 * 2**20, f"the server grew by {grown / 2**20:.0f} MiB"
    assert post(server, "/v2/models/scenes/infer", v2_body())[0] == 200


def test_batch_size_is_checked_before_anything_is_decoded(server):
    body, headers = bytes_request([png((16, 16), seed=1)] * 30_000)  # ~30 MB of images
    started = time.monotonic()
    status, reply = post(server, "/v2/models/scenes/infer", body, headers)
    assert status == 400 and "exceeds the limit of 256" in reply["error"]
    assert time.monotonic() - started < 5
    assert metric(server, 'mavias_serve_requests_total{model="scenes",outcome="invalid",version="v1"}') == 1


def test_liveness_answers_while_eight_clients_send_maximum_size_requests(server):
    body, headers = bytes_request([smooth_png((1_000, 1_000))] * 64)  # 64 Mpx: the per-request budget
    stop, answers, failures = threading.Event(), [], []

    # A 64-Mpx request can take tens of seconds on a busy 2-core box, hence the timeout; an error is a failure of
    # the test, not a thread dying on the side.
    def client() -> None:
        while not stop.is_set():
            try:
                status, _ = request(server, "/v2/models/scenes/infer", body, headers, timeout=120)
            except OSError as err:
                status = repr(err)
            (answers if status == 200 else failures).append(status)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    latencies = []
    for _ in range(60):
        started = time.perf_counter()
        assert get(server, "/v2/health/live")[0] == 200
        latencies.append(time.perf_counter() - started)
        time.sleep(0.02)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    median, slowest = statistics.median(latencies), max(latencies)
    assert answers and not failures, failures[:3]
    # Decoding on the event loop held every probe for the seconds one request takes to decode; the 100-ms p99 target
    # is a speed figure and lives in `mavias bench serve`, so this only tells a free loop from a blocked one.
    assert median < 0.05 and slowest < 2.0, f"liveness median {median * 1000:.1f} ms, slowest {slowest * 1000:.0f} ms"


HEADER = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 16, 16],
                                 "parameters": {"binary_data_size": 4000}}]}).encode()


@pytest.mark.parametrize(("body", "headers", "message"), [
    (v2_body(shape=(1, 3, 16, 1e20), data=[0.5]), {}, "shape"),
    (v2_body(shape=(2**40, 2**40, 2**40, 2**40), data=[0.5]), {}, "does not match"),
    (v2_body(datatype="BYTES", shape=(2**62, 1), data=["aGk="]), {}, "exceeds the limit"),
    (HEADER + bytes(3072), {"Inference-Header-Content-Length": str(len(HEADER))}, "binary_data_size"),
    (HEADER.replace(b"4000", b"3072") + bytes(3080), {"Inference-Header-Content-Length": str(len(HEADER))},
     "add up to 3072"),
    (b"{not json" + bytes(10), {"Inference-Header-Content-Length": "9"}, "not valid JSON"),
    (b"{}", {"Inference-Header-Content-Length": "50"}, "Inference-Header-Content-Length"),
    (v2_body(datatype="BYTES", shape=(1,), data=["ünïcödé"]), {}, "base64"),
    (v2_body(data=["0.5"] * 768), {}, "must be numbers"),
    (v2_body(data=[True] * 768), {}, "must be numbers"),
    (v2_body(data=[[0.5, [0.5]]] * 384), {}, "regular array"),
    (v2_body(name="pixels"), {}, "unknown input"),
    (v2_body(data=[float("nan")] + [0.5] * 767), {}, "not valid JSON"),
    (json.dumps({"inputs": []}).encode(), {}, "inputs"),
    (json.dumps({"inputs": [{"name": "image"}]}).encode(), {}, "shape"),
    (v2_body(), {"Inference-Header-Content-Length": "²"}, "Inference-Header-Content-Length"),  # int() would take it
    (b'{"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": ' + b"[" * 1000 + b'"aGk=", "aGk="'
     + b"]" * 1000 + b"}]}", {}, "2 values, shape [1] needs 1"),  # nested past Python's recursion limit
])
def test_malformed_requests_get_a_4xx_with_a_one_line_reason(server, body, headers, message):
    status, reply = post(server, "/v2/models/scenes/infer", body, headers)
    assert 400 <= status < 500 and message in reply["error"], (status, reply)
    assert "\n" not in reply["error"]


def test_the_json_limit_holds_whatever_the_binary_data_header_says(start_server, versions):
    server = start_server("--model-dir", str(versions["v1"]), "--name", "scenes", "--max-json-mb", "0.05")
    padded = v2_body() + b" " * 60_000  # JSON over the 0.05 MiB limit, under the body's
    for path, headers in (("/v2/models/scenes/infer", {"Inference-Header-Content-Length": str(len(padded))}),
                          ("/v1/models/scenes:predict", {"Inference-Header-Content-Length": "1"})):  # V1 has none
        status, reply = post(server, path, padded, headers)
        assert status == 413 and "JSON limit" in reply["error"], (path, status, reply)


ROOT = Path(__file__).resolve().parents[3]
INLINE_CHECK = """
import json, sys
from mavias.ops.serve.rest import parse_inline
numbers, escaped_v2, escaped_v1 = (line.encode() for line in sys.stdin.read().splitlines())
assert json.loads(escaped_v2)["inputs"][0]["datatype"] == "BYTES" and json.loads(escaped_v1)["instances"][0]["b64"]
assert parse_inline(numbers, b'"BYTES"') and not parse_inline(escaped_v2, b'"BYTES"')
assert not parse_inline(escaped_v1, b'"b64"')
"""


def test_a_body_that_spells_its_image_marker_with_json_escapes_is_not_parsed_on_the_event_loop():
    escaped_v2 = v2_body(datatype="BYTES", shape=(1,), data=["aGk="]).replace(b'"BYTES"', b'"\\u0042YTES"')
    escaped_v1 = b'{"instances": [{"\\u0062\\u0036\\u0034": "aGk="}]}'
    lines = b"\n".join((v2_body(), escaped_v2, escaped_v1))
    checked = subprocess.run([str(serve_python()), "-c", INLINE_CHECK], input=lines, capture_output=True, timeout=60,
                             cwd=ROOT, check=False)  # the serving environment: orjson, fastapi
    assert checked.returncode == 0, checked.stderr.decode()[-2000:]


def test_v1_bodies_that_are_not_objects_and_non_finite_binary_data(server):
    for body in (b"[1, 2, 3]", b'"instances"', b'{"instances": 5}', b'{"instances": [[[0.5]]]}'):
        status, reply = post(server, "/v1/models/scenes:predict", body)
        assert status == 400 and "\n" not in reply["error"], (body, status, reply)
    batch = np.zeros((1, 3, 16, 16), np.float32)
    batch[0, 0, 0, 0] = np.inf
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("image", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=True)
    with pytest.raises(InferenceServerException, match="NaN or infinite"):
        http.infer("scenes", [tensor])
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("image", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch)
    with pytest.raises(InferenceServerException, match="INVALID_ARGUMENT.*NaN or infinite"):
        grpc.infer("scenes", [tensor])
    assert metric(server, 'mavias_serve_requests_total{model="scenes",outcome="invalid",version="v1"}') == 6


def test_bytes_images_in_binary_data_and_base64_json_equal_grpc(server):
    images = [png((40, 24), 1), png((16, 16), 2)]
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("image", [2], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_))
    expected = grpc.infer("scenes", [tensor]).as_numpy("logits")
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("image", [2], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_), binary_data=True)
    np.testing.assert_array_equal(http.infer("scenes", [tensor]).as_numpy("logits"), expected)
    encoded = [base64.b64encode(image).decode() for image in images]
    status, reply = post(server, "/v2/models/scenes/infer", v2_body(datatype="BYTES", shape=(2, 1),
                                                                      data=[[e] for e in encoded]))
    assert status == 200, reply
    logits = next(o for o in reply["outputs"] if o["name"] == "logits")
    np.testing.assert_allclose(np.reshape(logits["data"], logits["shape"]), expected, atol=1e-6)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritonclient_builds_a_request_from_the_model_metadata(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    metadata = client.get_model_metadata("scenes")
    if protocol == "grpc":
        metadata = {"inputs": [{"name": i.name, "datatype": i.datatype, "shape": list(i.shape)}
                               for i in metadata.inputs],
                    "outputs": [{"name": o.name, "datatype": o.datatype, "shape": list(o.shape)}
                                for o in metadata.outputs]}
    (spec,) = metadata["inputs"]
    assert spec == {"name": "image", "datatype": "FP32", "shape": [-1, 3, 16, 16]}
    assert metadata["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 3]},
                                   {"name": "label", "datatype": "BYTES", "shape": [-1]}]
    shape = [2, *spec["shape"][1:]]
    tensor = module.InferInput(spec["name"], shape, spec["datatype"])
    tensor.set_data_from_numpy(np.random.default_rng(0).random(shape, dtype=np.float32))
    result = client.infer("scenes", [tensor])
    assert result.as_numpy(metadata["outputs"][0]["name"]).shape == (2, 3)
