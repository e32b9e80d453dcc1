"""Routing of GPU tasks: a pool (concurrency), a queue (CeleryExecutor workers on GPU nodes) and, for the
KubernetesExecutor, a pod override requesting ``nvidia.com/gpu``. Locally (``airflow dags test``) none of it
matters and the tasks run on the CPU."""

from __future__ import annotations

from typing import Any

from kubernetes.client import models as k8s

from mavias.nightly.config import AirflowSection

GPU_RESOURCE = "nvidia.com/gpu"


def gpu_executor_config(gpus: int) -> dict[str, Any]:
    """``{"pod_override": V1Pod}`` asking for ``gpus`` GPUs (and tolerating GPU-node taints).

    The KubernetesExecutor accepts a ``kubernetes.client`` V1Pod only (a plain dict raises TypeError at run time).
    """
    resources = k8s.V1ResourceRequirements(limits={GPU_RESOURCE: str(gpus)}, requests={GPU_RESOURCE: str(gpus)})
    spec = k8s.V1PodSpec(
        containers=[k8s.V1Container(name="base", resources=resources)],  # "base": the task container's name
        tolerations=[k8s.V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")],
    )
    return {"pod_override": k8s.V1Pod(spec=spec)}


def gpu_task_kwargs(settings: AirflowSection) -> dict[str, Any]:
    """Operator arguments that send a task to the GPU workers."""
    return {
        "pool": settings.gpu_pool,
        "queue": settings.gpu_queue,
        "executor_config": gpu_executor_config(settings.gpus_per_task),
    }
