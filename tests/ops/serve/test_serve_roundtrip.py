"""The server as a real process: tritonclient HTTP and gRPC round trips, V1, images, malformed requests, readiness."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from torchvision.transforms import InterpolationMode, v2
from tritonclient.utils import InferenceServerException

from mavias.ops.export.session import make_session
from mavias.ops.serve.preprocess import card_preprocessing, preprocess
from tests.ops.serve.conftest import png, post, v2_body

pytestmark = pytest.mark.slow


def bare_logits(version_dir, batch: np.ndarray) -> np.ndarray:
    session = make_session(version_dir / "model.onnx", providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"image": batch})[0]


@pytest.fixture
def server(start_server, versions):
    return start_server("--model-dir", str(versions["v1"]), "--name", "scenes")


def test_http_and_grpc_round_trips_equal_onnxruntime(server, versions):
    batch = np.random.default_rng(0).random((5, 3, 16, 16), dtype=np.float32)
    expected = bare_logits(versions["v1"], batch)
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.is_server_ready() and http.is_model_ready("scenes")
    for binary in (False, True):  # JSON (no Content-Type sent) and the binary tensor extension
        tensor = httpclient.InferInput("image", list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        result = http.infer("scenes", [tensor])
        np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=0, atol=1e-5)
        assert result.get_response()["model_version"] == "v1"
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("image", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch)
    result = grpc.infer("scenes", [tensor])
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=0, atol=1e-5)
    labels = [label.decode() for label in result.as_numpy("label")]
    assert labels == [["bird", "dog", "vehicle"][i] for i in expected.argmax(1)]


def test_encoded_images_preprocessed_as_the_card_says(server, versions):
    images = [png((40, 24), 1), png((16, 16), 2), png((17, 33), 3)]
    card = json.loads((versions["v1"] / "model_card.json").read_text())
    spec = card_preprocessing(card)
    torch_eval = v2.Compose([v2.Resize(spec.resize, interpolation=InterpolationMode.BILINEAR, antialias=True),
                             v2.CenterCrop(spec.center_crop), v2.PILToTensor()])
    reference = np.stack([torch_eval(Image.open(io.BytesIO(data))).numpy() / np.float32(255) for data in images])
    ours = np.stack([preprocess(Image.open(io.BytesIO(data)), spec) for data in images])
    np.testing.assert_array_equal(ours, reference)  # torchvision resizes PIL images with PIL itself: bit for bit
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("image", [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_))
    got = grpc.infer("scenes", [tensor]).as_numpy("logits")
    np.testing.assert_allclose(got, bare_logits(versions["v1"], ours.astype(np.float32)), rtol=0, atol=1e-5)


@pytest.mark.parametrize(("body", "message"), [
    (v2_body(shape=(1, 3, 8, 8)), "does not match"),
    (v2_body(data=[0.5] * 10), "needs 768"),
    (v2_body(name="pixels"), "unknown input"),
    (v2_body(datatype="INT64", data=[1] * 768), "not accepted"),
    (v2_body(datatype="BYTES", shape=(1,), data=[base64.b64encode(b"not an image").decode()]), "cannot decode"),
    (v2_body(datatype="BYTES", shape=(1,), data=["not base64!"]), "not base64"),
    (b"{not json", ""),
])
def test_malformed_v2_requests_get_a_4xx_with_a_message(server, body, message):
    status, reply = post(server, "/v2/models/scenes/infer", body)
    assert 400 <= status < 500, (status, reply)
    assert message in json.dumps(reply)
    status, _ = post(server, "/v2/models/scenes/infer", v2_body())
    assert status == 200  # the server keeps serving


def test_v1_instances_and_request_limits(start_server, versions):
    server = start_server("--model-dir", str(versions["v1"]), "--name", "scenes", "--max-body-mb", "0.05",
                          "--max-batch", "2")
    image = np.random.default_rng(3).random((3, 16, 16), dtype=np.float32)
    status, reply = post(server, "/v1/models/scenes:predict", json.dumps({"instances": [image.tolist()]}).encode())
    assert status == 200
    expected = bare_logits(versions["v1"], image[None])[0]
    np.testing.assert_allclose(reply["predictions"][0]["logits"], expected, atol=1e-5)
    encoded = {"b64": base64.b64encode(png((16, 16), 4)).decode()}
    status, reply = post(server, "/v1/models/scenes:predict", json.dumps({"instances": [encoded, encoded]}).encode())
    assert status == 200 and len(reply["predictions"]) == 2
    assert reply["predictions"][0]["label"] in ("bird", "dog", "vehicle")
    status, reply = post(server, "/v1/models/scenes:predict", json.dumps({"instances": [{"b64": "%%%"}]}).encode())
    assert status == 400 and "base64" in json.dumps(reply)
    status, reply = post(server, "/v1/models/scenes:predict", json.dumps({"instances": [encoded] * 3}).encode())
    assert status == 400 and "exceeds the limit of 2" in json.dumps(reply)
    status, reply = post(server, "/v2/models/scenes/infer", v2_body(shape=(16, 3, 16, 16)))
    assert status == 413 and "exceeds the limit" in reply["error"]
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("image", [32, 3, 16, 16], "FP32")  # 96 KiB of raw tensor data
    tensor.set_data_from_numpy(np.zeros((32, 3, 16, 16), np.float32))
    with pytest.raises(InferenceServerException, match="RESOURCE_EXHAUSTED|larger than max"):
        grpc.infer("scenes", [tensor])
