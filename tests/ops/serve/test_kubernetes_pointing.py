"""Promotion on Kubernetes: the nightly promote step and ``mavias registry point|rollback`` point a KServe
InferenceService at the promoted version, through the real ``kubernetes`` client and a kubeconfig.

No Kubernetes API server can run on this machine (no container engine; kube-apiserver is on neither PyPI nor Debian),
so the client talks over HTTP on 127.0.0.1 to a stand-in process (tests/ops/serve/kube_apiserver.py) that implements
what pointing uses: GET and PUT of an InferenceService with bearer-token authentication, 404, and resourceVersion
conflicts (409), plus injected 403/503 answers. The registry is a real moto S3 server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mavias.cli import app
from mavias.ops.nightly import release, report
from mavias.ops.nightly.config import NightlyConfig, NightlyConfigError, load_nightly_config
from mavias.ops.registry import ModelRegistry
from mavias.ops.registry.kubernetes import InferenceServiceRef, storage_uri_of
from mavias.ops.reporting.render import render_email
from mavias.storage.s3 import S3Settings
from mavias.utils.servers import free_port, stop_process, wait_until_answering
from tests.support.s3server import moto_endpoint, s3_client, s3_settings  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "stand-in-token"
TARGET = InferenceServiceRef(namespace="mavias", name="mavias-scenes")
MODEL = "scenes"


@dataclass
class KubeAPI:
    """The stand-in API server process and a kubeconfig pointing at it."""

    url: str
    kubeconfig: Path

    def control(self, path: str, body: dict) -> None:
        request = urllib.request.Request(f"{self.url}/_test/{path}", json.dumps(body).encode(), method="POST")
        urllib.request.urlopen(request, timeout=5).close()

    def fail_next(self, status: int, count: int = 1, method: str | None = None) -> None:
        self.control("faults", {"status": status, "count": count, "method": method})

    def service(self, target: InferenceServiceRef = TARGET) -> dict:
        path = f"/apis/serving.kserve.io/v1beta1/namespaces/{target.namespace}/inferenceservices/{target.name}"
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def serves(self) -> str | None:
        return storage_uri_of(self.service())

    def log(self) -> list[tuple[str, int]]:
        with urllib.request.urlopen(f"{self.url}/_test/log", timeout=5) as response:
            return [(method, status) for method, _, status in json.loads(response.read())]


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "airflow-worker", "user": {"token": TOKEN}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "airflow-worker"}}],
    }))
    return path


@pytest.fixture
def kube_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeAPI]:
    """A stand-in API server holding infra/kserve/inferenceservice.yaml; $KUBECONFIG points at it."""
    port = free_port()
    log_path = tmp_path / "kube_apiserver.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("kube_apiserver.py")), str(port),
                                    TOKEN], stdout=log, stderr=subprocess.STDOUT)
    try:
        api = KubeAPI(f"http://127.0.0.1:{port}", write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}"))
        wait_until_answering(f"{api.url}/_test/log", process, timeout_s=20, log_path=log_path)
        api.control("objects", yaml.safe_load((ROOT / "infra" / "kserve" / "inferenceservice.yaml").read_text()))
        monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield api
    finally:
        stop_process(process, grace_s=5)


@pytest.fixture
def registry(s3_client, s3_settings: S3Settings, tmp_path: Path) -> ModelRegistry:  # noqa: ANN001 - boto3 client
    registry = ModelRegistry(s3_client, s3_settings, MODEL)
    for version in ("v1", "v2"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "model.onnx").write_bytes(version.encode())
        registry.publish_version(tmp_path / version, version)
    return registry


def night_config(settings: S3Settings, workspace: Path, target: InferenceServiceRef | None = TARGET,
                 retry_s: float = 1.0) -> NightlyConfig:
    return NightlyConfig(model_name=MODEL, s3=settings, workspace=workspace,
                         serving={"inference_service": target, "retry_s": retry_s})


def promote(cfg: NightlyConfig, registry: ModelRegistry, version: str) -> dict:
    current = registry.production()
    evaluated = {"production_etag": registry.production_and_etag()[1],
                 "production_version": current and current.version}
    return release.promote(cfg, {"version": version, "uri": registry.version_uri(version)}, evaluated)


def test_each_promotion_points_the_inference_service_and_a_rerun_changes_nothing(kube_api, registry, s3_settings,
                                                                                 tmp_path):
    cfg = night_config(s3_settings, tmp_path)
    for version in ("v1", "v2"):
        result = promote(cfg, registry, version)
        assert result["promoted"] and result["serving"] == {"inference_service": "mavias/mavias-scenes",
                                                            "uri": registry.version_uri(version), "pointed": True,
                                                            "warning": ""}
        assert kube_api.serves() == registry.version_uri(version)
    assert kube_api.service()["spec"]["predictor"]["containers"][0]["image"] == "ghcr.io/example/mavias-serve:0.1.0"
    requests = len(kube_api.log())
    rerun = promote(cfg, registry, "v2")
    assert not rerun["promoted"] and rerun["serving"]["pointed"]
    assert kube_api.log()[requests:] == [("GET", 200)]  # already served: no replace, no new revision
    assert release.serving_problem(rerun) is None


def test_a_slow_pointing_never_undoes_an_operators_rollback(kube_api, registry, s3_settings, tmp_path):
    cfg = night_config(s3_settings, tmp_path)
    for version in ("v1", "v2"):
        promote(cfg, registry, version)
    registry.rollback()  # the operator rolls back to v1 ...
    release.point_serving(cfg, registry, "v1")  # ... and serving follows it
    requests = len(kube_api.log())
    late = release.point_serving(cfg, registry, "v2")  # the night's retried pointing of v2 arrives afterwards
    assert not late["pointed"] and "production is v1 now, not v2" in late["warning"]
    assert kube_api.log()[requests:] == [] and kube_api.serves() == registry.version_uri("v1")


def test_without_serving_configured_nothing_is_pointed(kube_api, registry, s3_settings, tmp_path):
    result = promote(night_config(s3_settings, tmp_path, target=None), registry, "v1")
    assert result["promoted"] and result["serving"] is None and kube_api.log() == []


def test_a_concurrent_change_is_read_again_and_kept(kube_api, registry, s3_settings, tmp_path):
    kube_api.control("concurrent-writes", {"count": 1})
    result = promote(night_config(s3_settings, tmp_path), registry, "v1")
    assert result["serving"]["pointed"]
    assert kube_api.log() == [("GET", 200), ("PUT", 409), ("GET", 200), ("PUT", 200)]
    service = kube_api.service()
    assert storage_uri_of(service) == registry.version_uri("v1")
    assert service["metadata"]["labels"] == {"touched": "yes"}  # the other writer's change is not overwritten


def test_a_brief_outage_is_retried(kube_api, registry, s3_settings, tmp_path):
    kube_api.fail_next(503, count=2, method="PUT")
    result = promote(night_config(s3_settings, tmp_path, retry_s=10), registry, "v1")
    assert result["serving"]["pointed"] and kube_api.serves() == registry.version_uri("v1")
    assert [status for _, status in kube_api.log()].count(503) == 2


@pytest.mark.parametrize(("fault", "expected"), [
    ("down", "did not answer"),
    (403, "needs the verbs get, update on inferenceservices.serving.kserve.io in namespace mavias"),
    (503, "answered 503"),
])
def test_a_failed_pointing_keeps_the_promotion_and_the_report_says_how_to_retry(
        kube_api, registry, s3_settings, tmp_path, monkeypatch, fault, expected):
    if fault == "down":
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "gone", f"http://127.0.0.1:{free_port()}")))
    else:
        kube_api.fail_next(fault, count=1000)
    cfg = night_config(s3_settings, tmp_path, retry_s=1.0)
    result = promote(cfg, registry, "v2")
    assert result["promoted"] and registry.production().version == "v2"  # the promotion stands
    warning = release.serving_problem(result)
    assert warning.startswith("serving NOT updated: production is v2, but InferenceService mavias/mavias-scenes")
    assert expected in warning
    assert warning.endswith("Retry: mavias registry point --name scenes --inference-service mavias/mavias-scenes "
                            "--version v2")
    context, _ = report.build_report_context(
        cfg, {"sensed": {"night": "20250301T000000"}, "published": {"uri": result["uri"]}, "promoted": result},
        trained=True, decision="", skip_promotion=False, production_version="v2")
    email = render_email(context)
    assert email.subject.endswith("promoted, serving NOT updated")
    assert warning in email.text
    kube_api.control("clear-faults", {})
    assert kube_api.serves().endswith("/20250102T020000-0123abcd/")  # unchanged


# -- the command line ---------------------------------------------------------------------------------------------


@pytest.fixture
def cli(registry, s3_settings) -> Iterator:
    env = {"MAVIAS_S3_BUCKET": s3_settings.bucket, "MAVIAS_S3_ENDPOINT_URL": s3_settings.endpoint_url,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "MAVIAS_MODEL_NAME": MODEL}
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, ["registry", *args], env=env)

    yield invoke


def test_cli_points_production_or_a_version_and_follows_a_rollback(kube_api, registry, cli):
    for version in ("v1", "v2"):
        assert cli("promote", version).exit_code == 0
    pointed = cli("point", "--inference-service", "mavias/mavias-scenes")
    assert pointed.exit_code == 0, pointed.output
    assert kube_api.serves() == registry.version_uri("v2") and "now serves" in pointed.output
    assert cli("point", "-i", "mavias/mavias-scenes", "--version", "v1").exit_code == 0
    assert kube_api.serves() == registry.version_uri("v1")
    assert cli("point", "-i", "mavias/mavias-scenes").exit_code == 0
    rolled = cli("rollback", "--inference-service", "mavias/mavias-scenes")
    assert rolled.exit_code == 0 and "production: v1" in rolled.output
    assert kube_api.serves() == registry.version_uri("v1")


def test_cli_rollback_keeps_the_rollback_when_pointing_fails(kube_api, registry, cli):
    for version in ("v1", "v2"):
        assert cli("promote", version).exit_code == 0
    kube_api.fail_next(403, count=1000)
    rolled = cli("rollback", "-i", "mavias/mavias-scenes", "--retry-seconds", "0")
    assert rolled.exit_code == 2 and "Traceback" not in rolled.output
    assert "production: v1" in rolled.output and "The registry is rolled back" in rolled.output
    assert "mavias registry point --name scenes --inference-service mavias/mavias-scenes --version v1" in rolled.output
    assert registry.production().version == "v1"
    kube_api.control("clear-faults", {})
    assert kube_api.serves().endswith("/20250102T020000-0123abcd/")


@pytest.mark.parametrize(("args", "setup", "message"), [
    (["-i", "mavias/nope"], None, "InferenceService mavias/nope not found"),
    (["-i", "mavias/mavias-scenes"], 403, "needs the verbs get, update on inferenceservices.serving.kserve.io"),
    (["-i", "mavias/mavias-scenes", "--container", "server"], None, "has no predictor container 'server'"),
    (["-i", "mavias-scenes"], None, "expected NAMESPACE/NAME"),
    ([], None, "pass --inference-service NAMESPACE/NAME"),
    (["-i", "mavias/mavias-scenes"], "no kubeconfig", "no Kubernetes configuration"),
    (["-i", "mavias/mavias-scenes"], "empty kubeconfig", "cannot be used"),
])
def test_cli_user_errors_are_one_line(kube_api, registry, cli, monkeypatch, tmp_path, args, setup, message):
    assert cli("promote", "v1").exit_code == 0
    if setup == 403:
        kube_api.fail_next(403, count=1000)
    if setup == "no kubeconfig":
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    if setup == "empty kubeconfig":
        (tmp_path / "empty").write_text("apiVersion: v1\nkind: Config\n")
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "empty"))
    result = cli("point", *args, "--retry-seconds", "0")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    kube_api.control("clear-faults", {})
    assert kube_api.serves().endswith("/20250102T020000-0123abcd/")  # nothing changed


def test_the_example_config_points_the_example_inference_service(tmp_path):
    cfg = load_nightly_config(ROOT / "infra" / "nightly.example.yaml", environ={})
    manifest = yaml.safe_load((ROOT / "infra" / "kserve" / "inferenceservice.yaml").read_text())
    assert cfg.serving.inference_service == InferenceServiceRef(
        namespace=manifest["metadata"]["namespace"], name=manifest["metadata"]["name"],
        container=manifest["spec"]["predictor"]["containers"][0]["name"])
    assert load_nightly_config(environ={}).serving.inference_service is None  # off by default
    override = {"MAVIAS_NIGHTLY__SERVING__INFERENCE_SERVICE": "{namespace: ml, name: Scenes}"}
    with pytest.raises(NightlyConfigError, match="serving.inference_service.name"):
        load_nightly_config(ROOT / "infra" / "nightly.example.yaml", environ=override)
