"""Routing of GPU tasks: a pool (concurrency), a queue (CeleryExecutor workers on GPU nodes) and, for the
KubernetesExecutor, a pod override requesting ``nvidia.com/gpu``. Locally (``airflow dags test``) none of it
matters and the tasks run on the CPU."""

from __future__ import annotations

from typing import Any

from kubernetes.client import models as k8s

from mavias.ops.nightly.config import AirflowSection

GPU_RESOURCE = "nvidia.com/gpu"
GPU_NODES = {"mavias.io/pool": "gpu"}  # replaces the pod template's CPU-pool node selector (infra/helm)


def gpu_executor_config(gpus: int) -> dict[str, Any]:
    """``{"pod_override": V1Pod}`` asking for ``gpus`` GPUs on the GPU node pool (tolerating its taint), with a
    memory-backed ``/dev/shm``: the training's data-loader workers pass batches through it (one 128-image batch at
    224 px is 77 MB), as NCCL does between the processes of several GPUs, and a container's default is 64 MiB.

    The KubernetesExecutor accepts a ``kubernetes.client`` V1Pod only (a plain dict raises TypeError at run time).
    """
    resources = k8s.V1ResourceRequirements(limits={GPU_RESOURCE: str(gpus)}, requests={GPU_RESOURCE: str(gpus)})
    container = k8s.V1Container(  # "base": the task container's name
        name="base", resources=resources, volume_mounts=[k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm")])
    spec = k8s.V1PodSpec(
        containers=[container],
        node_selector=GPU_NODES,
        tolerations=[k8s.V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")],
        volumes=[k8s.V1Volume(name="dshm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory"))],
    )
    return {"pod_override": k8s.V1Pod(spec=spec)}


def gpu_task_kwargs(settings: AirflowSection) -> dict[str, Any]:
    """Operator arguments that send a task to the GPU workers."""
    return {
        "pool": settings.gpu_pool,
        "queue": settings.gpu_queue,
        "executor_config": gpu_executor_config(settings.gpus_per_task),
    }
