"""Images and manifests: no container engine or cluster runs here, so the Dockerfiles are linted (hadolint) and the
manifests validated against the Kubernetes schemas (kubernetes-validate, strict)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from mavias.ops.registry.kubernetes import GROUP, PLURAL, RBAC_VERBS, with_storage_uri

ROOT = Path(__file__).resolve().parents[3]
ISVC = ROOT / "infra" / "kserve" / "inferenceservice.yaml"
PREDICTOR_FIELDS = {"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "containerConcurrency", "timeout",
                    "canaryTrafficPercent", "logger", "batcher"}  # KServe's own fields beside the pod spec


def validate(document: dict) -> None:
    kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    dockerfiles = [ROOT / "docker" / "Dockerfile", ROOT / "docker" / "Dockerfile.serve"]
    result = subprocess.run([hadolint, "--config", str(ROOT / "docker" / "hadolint.yaml"), *map(str, dockerfiles)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_inference_service_predictor_is_a_valid_pod_spec():
    service = yaml.safe_load(ISVC.read_text())
    assert (service["apiVersion"], service["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    predictor = dict(service["spec"]["predictor"])
    args = predictor["containers"][0]["args"]
    assert args[args.index("--host") + 1] == "0.0.0.0"  # the server listens on 127.0.0.1 unless told otherwise
    assert '"--host", "0.0.0.0"]' in (ROOT / "docker" / "Dockerfile.serve").read_text()
    pod_spec = {k: v for k, v in predictor.items() if k not in PREDICTOR_FIELDS}
    validate({"apiVersion": "v1", "kind": "Pod", "metadata": service["metadata"], "spec": pod_spec})
    assert "nvidia.com/gpu" in predictor["containers"][0]["resources"]["limits"]  # so it must tolerate the GPU pool
    assert pod_spec["nodeSelector"] == {"mavias.io/pool": "gpu"}
    assert pod_spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    labels, annotations = service["metadata"]["labels"], service["metadata"]["annotations"]
    assert "--auth-token-file" in args or all(labels[f"networking.{owner}/visibility"] == "cluster-local" for owner in (
        "knative.dev", "kserve.io"))  # a server without a token is on no external gateway, in either KServe mode
    assert annotations["serving.kserve.io/deploymentMode"] == "Serverless"  # the mode whose label is read first
    assert "--auth-token-file" not in args or "serving.kserve.io/enable-prometheus-scraping" not in annotations
    with pytest.raises(kubernetes_validate.ValidationError):  # the check catches a misspelt field
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": service["metadata"],
                  "spec": pod_spec | {"serviceAcountName": "x"}})


def task_pod(values: dict) -> dict:
    """What the values add to the chart's own pod template (which mounts airflow.cfg and the chart's env), as a pod."""
    workers = values["workers"]
    container = {"name": "base", "image": "mavias-airflow", "envFrom": yaml.safe_load(values["extraEnvFrom"]),
                 "env": values["env"], "volumeMounts": values["volumeMounts"] + workers["extraVolumeMounts"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "task"},
            "spec": {"containers": [container], "volumes": values["volumes"] + workers["extraVolumes"],
                     "nodeSelector": workers["nodeSelector"], "serviceAccountName": workers["serviceAccount"]["name"]}}


def assert_nightly_config_mounted(pod: dict) -> None:
    """The container's MAVIAS_NIGHTLY_CONFIG lies on a mount of the ConfigMap the deployment guide creates."""
    (container,) = pod["containers"]
    path = next(e["value"] for e in container["env"] if e["name"] == "MAVIAS_NIGHTLY_CONFIG")
    maps = {v["name"] for v in pod["volumes"] if v.get("configMap", {}).get("name") == "mavias-nightly"}
    mounts = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in maps]
    assert mounts and path.startswith(mounts[0] + "/"), (path, mounts)
    assert "configmap mavias-nightly --from-file=nightly.yaml=" in (ROOT / "infra" / "README.md").read_text()
    assert path.endswith("/nightly.yaml")


def test_helm_values_pod_template_and_pool_job_validate():
    values = yaml.safe_load((ROOT / "infra" / "helm" / "airflow-values.yaml").read_text())
    assert "podTemplate" not in values  # a template of its own would drop the chart's airflow.cfg mount and env
    validate(task_pod(values))
    (secret,) = yaml.safe_load(values["extraEnvFrom"])
    assert secret["secretRef"]["optional"]  # S3 settings may come from aws_default alone
    assert {m["mountPath"] for m in values["workers"]["extraVolumeMounts"]} == {"/opt/mavias-work"}
    assert_nightly_config_mounted(task_pod(values)["spec"])
    assert {s["envName"] for s in values["secret"]} == {"AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW_CONN_SMTP_DEFAULT"}
    validate(yaml.safe_load((ROOT / "infra" / "helm" / "gpu-pool-job.yaml").read_text()))


def test_promotion_points_the_inference_service_at_a_version():
    service = yaml.safe_load(ISVC.read_text())
    updated = with_storage_uri(service, "s3://mavias/models/mavias-scenes/2025-01-03-deadbeef/")
    (container,) = updated["spec"]["predictor"]["containers"]
    assert [e for e in container["env"] if e["name"] == "STORAGE_URI"] == [
        {"name": "STORAGE_URI", "value": "s3://mavias/models/mavias-scenes/2025-01-03-deadbeef/"}]
    assert container["image"] == service["spec"]["predictor"]["containers"][0]["image"]
    assert service["spec"]["predictor"]["containers"][0]["env"][0]["value"].endswith("0123abcd/")  # not mutated
    with pytest.raises(ValueError, match="version folder"):
        with_storage_uri(service, "s3://mavias/models/mavias-scenes/model.onnx")


def test_rbac_lets_the_task_pods_point_the_inference_service():
    role, binding = yaml.safe_load_all((ROOT / "infra" / "kserve" / "rbac.yaml").read_text())
    for document in (role, binding):
        validate(document)
    service = yaml.safe_load(ISVC.read_text())
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == service["metadata"]["namespace"]
    (rule,) = role["rules"]
    assert (rule["apiGroups"], rule["resources"], sorted(rule["verbs"])) == (
        [GROUP], [PLURAL], sorted(RBAC_VERBS.split(", ")))  # exactly what the pointing uses, and what its error says
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    values = yaml.safe_load((ROOT / "infra" / "helm" / "airflow-values.yaml").read_text())
    account = values["workers"]["serviceAccount"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": service["metadata"]["namespace"]}]


def test_celery_values_and_gpu_worker_validate_and_agree_with_the_kubernetes_variant():
    helm = ROOT / "infra" / "helm"
    kubernetes, celery = (yaml.safe_load((helm / name).read_text())
                          for name in ("airflow-values.yaml", "airflow-values-celery.yaml"))
    assert (kubernetes["executor"], celery["executor"]) == ("KubernetesExecutor", "CeleryExecutor")
    for key in ("images", "secret", "env", "volumes", "volumeMounts", "extraEnvFrom", "airflowVersion",
                "fernetKeySecretName", "jwtSecretName", "apiSecretKeySecretName"):
        assert celery[key] == kubernetes[key], key
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert f"ARG AIRFLOW_VERSION={kubernetes['airflowVersion']}\n" in dockerfile  # the chart reads the image's version
    assert celery["workers"]["serviceAccount"] == kubernetes["workers"]["serviceAccount"]
    assert "--queues default" in celery["workers"]["args"][-1]
    worker = yaml.safe_load((helm / "celery-gpu-worker.yaml").read_text())
    validate(worker)
    pod = worker["spec"]["template"]["spec"]
    assert_nightly_config_mounted(pod)
    (container,) = pod["containers"]
    assert container["args"][container["args"].index("--queues") + 1] == "gpu"
    assert container["image"] == f"{celery['images']['airflow']['repository']}:{celery['images']['airflow']['tag']}"
    assert pod["serviceAccountName"] == celery["workers"]["serviceAccount"]["name"]
    secrets = {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e}
    data = celery["data"]
    assert {data[k] for k in ("metadataSecretName", "resultBackendSecretName", "brokerUrlSecretName")} <= secrets
    assert {s["secretName"] for s in celery["secret"]} <= secrets
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in container["env"]}  # outside the chart: no airflow.cfg tells it
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].endswith("/execution/")
    worker_config = {(section, key): str(value) for section, options in celery["config"].items() if section != "scheduler"
                     for key, value in options.items() if (section, key) != ("celery", "worker_concurrency")}
    assert worker_config and all(env[f"AIRFLOW__{s.upper()}__{k.upper()}"] == v for (s, k), v in worker_config.items())
    keys = {e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for e in container["env"] if "valueFrom" in e}
    assert {keys[n] for n in ("AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API__SECRET_KEY")} == {
        (celery["fernetKeySecretName"], "fernet-key"), (celery["apiSecretKeySecretName"], "api-secret-key")}  # as named
    assert "AIRFLOW__API_AUTH__JWT_SECRET" not in keys  # it signs the Execution API's tokens: no task may hold it
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert {"cpu", "memory"} <= set(requests) and "memory" in limits  # not best-effort, the first pod evicted
    assert all(ref["secretRef"].get("optional") for ref in container["envFrom"])
    with pytest.raises(kubernetes_validate.ValidationError):  # the check catches a misspelt field
        validate(worker | {"spec": worker["spec"] | {"replica": 2}})


@pytest.mark.parametrize("gpus", [1, 4])
def test_the_gpu_pod_override_asks_for_n_gpus_and_is_a_valid_pod(gpus):
    from kubernetes.client import ApiClient

    spec = importlib.util.spec_from_file_location("gpu_resources", ROOT / "plugins" / "mavias_airflow" / "resources.py")
    resources = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(resources)
    pod = ApiClient().sanitize_for_serialization(resources.gpu_executor_config(gpus)["pod_override"])
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == container["resources"]["requests"] == {"nvidia.com/gpu": str(gpus)}
    # data-loader workers (and NCCL, with several GPUs) pass batches through /dev/shm: 64 MiB by default
    assert container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert pod["spec"]["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    values = yaml.safe_load((ROOT / "infra" / "helm" / "airflow-values.yaml").read_text())
    assert values["workers"]["nodeSelector"].keys() == pod["spec"]["nodeSelector"].keys()  # replaces the CPU pool's
    validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "task"},
              "spec": pod["spec"] | {"containers": [container | {"image": "mavias-airflow"}]}})
