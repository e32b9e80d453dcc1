"""The server following the registry (moto_server on 127.0.0.1): readiness, promotion under load, refusal, rollback."""

from __future__ import annotations

import json
import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from mavias.ops.export.session import make_session
from mavias.ops.registry import ModelRegistry
from tests.ops.serve.conftest import get, metric
from tests.support.s3server import TEST_CREDENTIALS, moto_endpoint, s3_client, s3_settings  # noqa: F401

pytestmark = pytest.mark.slow

BATCH = np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32)
LOAD_THREADS, LOAD_MAX_SECONDS, LOAD_MAX_REQUESTS = 4, 40.0, 2000  # per thread; it stops soon after v2 answers


def wait_for(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def infer(client: grpcclient.InferenceServerClient) -> tuple[str, np.ndarray]:
    tensor = grpcclient.InferInput("image", list(BATCH.shape), "FP32")
    tensor.set_data_from_numpy(BATCH)
    result = client.infer("scenes", [tensor])
    return result.get_response().model_version, result.as_numpy("logits")


def publish(registry: ModelRegistry, folder, version: str) -> None:
    registry.publish_version(folder, version)
    current = registry.production()
    assert registry.promote(version, current.etag if current else None)


def test_follows_promotions_refusals_and_rollbacks(start_server, versions, s3_settings, s3_client, tmp_path):
    registry = ModelRegistry(s3_client, s3_settings, "scenes")
    env = {"MAVIAS_S3_ENDPOINT_URL": s3_settings.endpoint_url,
           **{f"MAVIAS_S3_{k.upper()}": v.get_secret_value() for k, v in TEST_CREDENTIALS.items()}}
    server = start_server("--registry", f"s3://{s3_settings.bucket}/models", "--name", "scenes",
                          "--poll-seconds", "0.2", "--cache-dir", str(tmp_path / "cache"), env=env)
    assert get(server, "/v2/health/ready")[0] != 200
    assert get(server, "/v2/models/scenes/ready")[0] != 200
    client = grpcclient.InferenceServerClient(server.grpc_url)
    expected = {v: make_session(versions[v] / "model.onnx").run(["logits"], {"image": BATCH})[0] for v in versions}

    publish(registry, versions["v1"], "v1")
    wait_for(lambda: get(server, "/v2/health/ready")[0] == 200, "the first version to load")
    assert infer(client)[0] == "v1"

    # promotion of v2 under a bounded concurrent load: no request fails, each answer matches its version
    results, failures, stop = [], [], threading.Event()

    def load() -> None:
        own = grpcclient.InferenceServerClient(server.grpc_url)
        deadline = time.monotonic() + LOAD_MAX_SECONDS
        for _ in range(LOAD_MAX_REQUESTS):
            if stop.is_set() or time.monotonic() > deadline:
                return
            try:
                results.append(infer(own))
            except Exception as err:  # noqa: BLE001 - every failure is counted, none expected
                failures.append(err)

    threads = [threading.Thread(target=load) for _ in range(LOAD_THREADS)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    publish(registry, versions["v2"], "v2")
    wait_for(lambda: any(version == "v2" for version, _ in results[-LOAD_THREADS:]), "v2 to answer", LOAD_MAX_SECONDS)
    time.sleep(0.5)  # and a little load on v2
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures[:3]
    seen = {version for version, _ in results}
    assert seen == {"v1", "v2"}, f"{len(results)} requests saw {seen}"
    for version, logits in results:
        np.testing.assert_allclose(logits, expected[version], rtol=0, atol=1e-5)
    assert metric(server, 'mavias_serve_requests_total{model="scenes",outcome="ok",version="v2"}') > 0
    assert metric(server, 'mavias_serve_request_seconds_count{model="scenes",version="v1"}') > 0
    assert metric(server, 'mavias_serve_version_info{model="scenes",version="v1"}') == 0
    assert metric(server, 'mavias_serve_version_info{model="scenes",version="v2"}') == 1

    # a corrupted version (ONNX bytes that do not match the card's sha256) is refused; v2 keeps serving
    corrupted = tmp_path / "v3"
    shutil.copytree(versions["v2"], corrupted)
    onnx = corrupted / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:-16] + bytes(16))
    publish(registry, corrupted, "v3")
    wait_for(lambda: "model_refused" in server.log_path.read_text(), "the refusal of v3")
    (refusal,) = [json.loads(line) for line in server.log_path.read_text().splitlines() if '"model_refused"' in line]
    assert (refusal["version"], refusal["serving"]) == ("v3", "v2")
    assert "does not match the model card" in refusal["reason"]
    assert metric(server, "mavias_serve_model_load_failures_total") == 1
    assert infer(client)[0] == "v2"
    assert get(server, "/v2/health/ready")[0] == 200

    # rollbacks are followed: v3 -> v2 (already serving) -> v1
    registry.rollback()
    registry.rollback()
    wait_for(lambda: infer(client)[0] == "v1", "the rollback to v1")
    np.testing.assert_allclose(infer(client)[1], expected["v1"], rtol=0, atol=1e-5)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["v1", "v2"]  # the served and the one before


def log_events(server, event: str) -> list[dict]:
    return [json.loads(line) for line in server.log_path.read_text().splitlines() if f'"{event}"' in line]


def test_follower_survives_every_error_and_readiness_follows_staleness(start_server, versions, s3_settings,
                                                                        s3_client, tmp_path):
    registry = ModelRegistry(s3_client, s3_settings, "scenes")
    env = {"MAVIAS_S3_ENDPOINT_URL": s3_settings.endpoint_url,
           **{f"MAVIAS_S3_{k.upper()}": v.get_secret_value() for k, v in TEST_CREDENTIALS.items()}}
    cache = tmp_path / "cache"
    server = start_server("--registry", f"s3://{s3_settings.bucket}/models", "--name", "scenes", "--poll-seconds",
                          "0.2", "--max-staleness-s", "1.5", "--cache-dir", str(cache), env=env)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    publish(registry, versions["v1"], "2025-01-01-aaaa")  # the registry's name, not the card's "v1"
    wait_for(lambda: get(server, "/v2/health/ready")[0] == 200, "the first version to load")
    assert infer(client)[0] == "2025-01-01-aaaa"
    assert metric(server, 'mavias_serve_version_info{model="scenes",version="2025-01-01-aaaa"}') == 1
    assert metric(server, 'mavias_serve_requests_total{model="scenes",outcome="ok",version="2025-01-01-aaaa"}') == 1
    good = s3_client.get_object(Bucket=s3_settings.bucket, Key=registry.pointer_key)["Body"].read()

    # a corrupt pointer, then a pointer naming "../x": each poll fails, is logged with its stack and counted
    for broken in (b"{not json", good.replace(b'"2025-01-01-aaaa"', b'"../x"')):
        errors = metric(server, "mavias_registry_poll_errors_total")
        s3_client.put_object(Bucket=s3_settings.bucket, Key=registry.pointer_key, Body=broken)
        wait_for(lambda: metric(server, "mavias_registry_poll_errors_total") >= errors + 2, "failed polls counted")
    failure = log_events(server, "registry_poll_failed")[-1]
    assert failure["error"] == "CorruptPointer" and "Traceback" in failure["exc_info"]
    assert infer(client)[0] == "2025-01-01-aaaa"  # the old version keeps serving...
    wait_for(lambda: get(server, "/v2/health/ready")[0] == 503, "readiness to turn false when stale")
    assert "not been polled successfully" in get(server, "/v2/health/ready")[1]["error"]
    assert metric(server, "mavias_registry_poll_age_seconds") > 1.5

    # ...and the follower is alive: a repaired pointer brings readiness back
    s3_client.put_object(Bucket=s3_settings.bucket, Key=registry.pointer_key, Body=good)
    wait_for(lambda: get(server, "/v2/health/ready")[0] == 200, "readiness after the repair")

    # an OSError while caching (a file where the version's folder goes) is survived too
    cache.mkdir(exist_ok=True)
    (cache / "2025-01-02-bbbb").write_text("in the way")
    publish(registry, versions["v2"], "2025-01-02-bbbb")
    wait_for(lambda: log_events(server, "registry_poll_failed")[-1]["error"] in ("FileExistsError",
                                                                                 "NotADirectoryError"),
             "the caching error")
    (cache / "2025-01-02-bbbb").unlink()
    wait_for(lambda: infer(client)[0] == "2025-01-02-bbbb", "the new version after the caching error")

    # a version whose card disagrees with its graph is refused at hot swap; the serving one stays
    for change, reason in ((lambda c: c | {"classes": ["a", "b"]}, "2 classes"),
                           (lambda c: c | {"preprocessing": c["preprocessing"] | {"center_crop": 12}}, "crops 12x12"),
                           (lambda c: c | {"preprocessing": c["preprocessing"] | {"normalisation": {
                               "in_model": True, "mean": [0.5] * 3, "std": [0.5] * 3}}}, "normalisation")):
        folder = tmp_path / f"bad-{reason[:5]}"
        shutil.copytree(versions["v1"], folder)
        card = json.loads((folder / "model_card.json").read_text())
        (folder / "model_card.json").write_text(json.dumps(change(card)))
        refusals = len(log_events(server, "model_refused"))
        publish(registry, folder, f"bad-{reason[:5].replace(' ', '-')}")
        wait_for(lambda: len(log_events(server, "model_refused")) > refusals, f"the refusal ({reason})")
        assert reason in log_events(server, "model_refused")[-1]["reason"]
        assert infer(client)[0] == "2025-01-02-bbbb"
    assert get(server, "/v2/health/ready")[0] == 200
