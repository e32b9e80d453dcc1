"""Promotion on Kubernetes: point a KServe InferenceService at a registry version, so KServe rolls out a revision.

The server image serves what KServe's storage initializer downloaded from the predictor container's ``STORAGE_URI``
(see infra/kserve/inferenceservice.yaml). Rolling back is pointing it at the earlier version. Needs the
``kubernetes`` client (in the ``airflow`` extra) and RBAC to get and update inferenceservices.
"""

from __future__ import annotations

import copy
from typing import Any

GROUP, API_VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
CONTAINER = "kserve-container"


def with_storage_uri(service: dict[str, Any], storage_uri: str, container: str = CONTAINER) -> dict[str, Any]:
    """A copy of the InferenceService whose predictor container ``container`` has ``STORAGE_URI=storage_uri``."""
    if not storage_uri.startswith("s3://") or not storage_uri.endswith("/"):
        raise ValueError(f"{storage_uri!r}: expected a registry version folder, s3://BUCKET/models/NAME/VERSION/")
    updated = copy.deepcopy(service)
    containers = updated["spec"]["predictor"].get("containers", [])
    target = next((c for c in containers if c.get("name") == container), None)
    if target is None:
        raise ValueError(f"InferenceService {service['metadata']['name']} has no predictor container {container!r}")
    env = [e for e in target.get("env", []) if e.get("name") != "STORAGE_URI"]
    target["env"] = [*env, {"name": "STORAGE_URI", "value": storage_uri}]
    return updated


def point_inference_service(name: str, namespace: str, storage_uri: str, *, api: Any | None = None) -> dict[str, Any]:
    """Serve ``storage_uri`` (e.g. ``ModelRegistry.version_uri(v)``) from InferenceService ``namespace/name``.

    Read, modify, replace: the replace carries the resourceVersion read, so a concurrent change fails (409)
    instead of being overwritten.
    """
    if api is None:
        from kubernetes import client, config

        config.load_config()
        api = client.CustomObjectsApi()
    current = api.get_namespaced_custom_object(GROUP, API_VERSION, namespace, PLURAL, name)
    return api.replace_namespaced_custom_object(GROUP, API_VERSION, namespace, PLURAL, name,
                                                with_storage_uri(current, storage_uri))
