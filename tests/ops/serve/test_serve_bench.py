"""`mavias bench serve`'s measuring parts against a real server: every client gets the logits ONNX Runtime
computes, the callers take turns, the server's own share is measured in the serving environment, and the floor
server answers what ONNX Runtime computes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mavias.ops.export.session import make_session
from mavias.tools.bench.serve import (
    ROUNDS,
    floor_server,
    interleaved_ms,
    raw_stub_call,
    rest_binary_call,
    server_handling,
    tritonclient_call,
)

pytestmark = pytest.mark.slow


def test_every_client_gets_the_logits_of_onnxruntime(start_server, versions):
    server = start_server("--model-dir", str(versions["v1"]), "--name", "bench")
    card = json.loads((versions["v1"] / "model_card.json").read_text())
    session = make_session(versions["v1"] / card["onnx"]["file"], providers=["CPUExecutionProvider"])
    batch = np.random.default_rng(1).random((2, 3, 16, 16), dtype=np.float32)
    (expected,) = session.run(None, {"image": batch})
    lean = raw_stub_call(server.grpc_url, "image", batch)()
    triton = tritonclient_call(server.grpc_url, "image", batch)().as_numpy("logits")
    rest = rest_binary_call(server.http_url, "image", batch)
    first, again = rest(), rest()  # the second call reuses the kept-alive connection
    np.testing.assert_allclose(first.reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(lean.reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(triton, expected, rtol=1e-5, atol=1e-6)


def test_callers_take_turns_within_the_budget():
    order: list[str] = []
    times = interleaved_ms({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, seconds=0.05,
                           max_requests=10 * ROUNDS)
    turns = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert turns == ["a", "b"] * ROUNDS
    assert all(len(values) >= 10 * ROUNDS and min(values) >= 0 for values in times.values())


def test_the_servers_own_share_is_timed_in_the_serving_environment(versions):
    share = server_handling(versions["v1"], 1, 0.5)
    assert share["requests"] >= 10 * ROUNDS
    assert share["handler_p50_ms"] > 0 and share["bare_p50_ms"] > 0
    assert share["overhead_ms"] == pytest.approx(share["handler_p50_ms"] - share["bare_p50_ms"])


def test_the_floor_server_answers_the_logits_of_onnxruntime(versions, tmp_path):
    card = json.loads((versions["v1"] / "model_card.json").read_text())
    session = make_session(versions["v1"] / card["onnx"]["file"], providers=["CPUExecutionProvider"])
    batch = np.random.default_rng(2).random((3, 3, 16, 16), dtype=np.float32)
    (expected,) = session.run(None, {"image": batch})
    with floor_server(versions["v1"], tmp_path / "floor.log") as address:
        answer = raw_stub_call(address, "image", batch)()
    np.testing.assert_allclose(answer.reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)
