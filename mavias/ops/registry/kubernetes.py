"""Promotion on Kubernetes: point a KServe InferenceService at a registry version, so KServe rolls out a revision.

The server image serves what KServe's storage initializer downloaded from the predictor container's ``STORAGE_URI``
(see infra/kserve/inferenceservice.yaml). Rolling back is pointing it at the earlier version. Needs the
``kubernetes`` client (in the ``airflow`` extra) and RBAC to get and update inferenceservices
(infra/kserve/rbac.yaml).

Transient failures (no connection, timeouts, 5xx, 429, and 409 when somebody else changed the InferenceService
between our read and our replace) are retried with backoff, each try reading the object again; the others end in a
:class:`InferenceServiceError` that says what to fix.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mavias.errors import UserError
from mavias.storage.s3 import is_transient, retrying

log = logging.getLogger(__name__)

GROUP, API_VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
CONTAINER = "kserve-container"
RBAC_VERBS = "get, update"
REQUEST_TIMEOUT_S = (5.0, 30.0)  # connect, read
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class InferenceServiceError(UserError):
    """The InferenceService could not be pointed at a version; the message says why and what to fix."""


class InferenceServiceRef(BaseModel):
    """Which InferenceService follows promotions, and the predictor container whose ``STORAGE_URI`` is set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(pattern=DNS_LABEL)
    name: str = Field(pattern=DNS_LABEL)
    container: str = Field(CONTAINER, pattern=DNS_LABEL)

    @classmethod
    def parse(cls, text: str, container: str = CONTAINER) -> InferenceServiceRef:
        """``NAMESPACE/NAME`` as typed on the command line."""
        namespace, slash, name = text.partition("/")
        if not slash or not namespace or not name:
            raise InferenceServiceError(f"--inference-service {text!r}: expected NAMESPACE/NAME, e.g. mavias/mavias-scenes")
        try:
            return cls(namespace=namespace, name=name, container=container)
        except ValueError:
            raise InferenceServiceError(
                f"--inference-service {text!r} / --container {container!r}: Kubernetes names are lowercase letters, "
                "digits and '-'") from None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def point_command(self, model_name: str, version: str) -> str:
        """The command that points this InferenceService at ``version`` by hand."""
        container = f" --container {self.container}" if self.container != CONTAINER else ""
        return f"mavias registry point --name {model_name} --inference-service {self}{container} --version {version}"


def _predictor_container(service: dict[str, Any], container: str) -> dict[str, Any] | None:
    """The predictor container named ``container`` (the object itself, so a caller may change it), if any."""
    return next((c for c in service["spec"]["predictor"].get("containers", []) if c.get("name") == container), None)


def with_storage_uri(service: dict[str, Any], storage_uri: str, container: str = CONTAINER) -> dict[str, Any]:
    """A copy of the InferenceService whose predictor container ``container`` has ``STORAGE_URI=storage_uri``."""
    if not storage_uri.startswith("s3://") or not storage_uri.endswith("/"):
        raise ValueError(f"{storage_uri!r}: expected a registry version folder, s3://BUCKET/models/NAME/VERSION/")
    updated = copy.deepcopy(service)
    target = _predictor_container(updated, container)
    if target is None:
        names = ", ".join(repr(c.get("name")) for c in updated["spec"]["predictor"].get("containers", [])) or "none"
        raise InferenceServiceError(f"InferenceService {service['metadata']['namespace']}/{service['metadata']['name']} "
                                    f"has no predictor container {container!r} (it has {names}); pass --container")
    env = [e for e in target.get("env", []) if e.get("name") != "STORAGE_URI"]
    target["env"] = [*env, {"name": "STORAGE_URI", "value": storage_uri}]
    return updated


def storage_uri_of(service: dict[str, Any], container: str = CONTAINER) -> str | None:
    """The ``STORAGE_URI`` the predictor container ``container`` serves, if set."""
    env = (_predictor_container(service, container) or {}).get("env", [])
    return next((e.get("value") for e in env if e.get("name") == "STORAGE_URI"), None)


def custom_objects_api(kubeconfig: str | Path | None = None) -> Any:
    """A ``CustomObjectsApi`` from ``kubeconfig``, else ``$KUBECONFIG`` or ~/.kube/config, else the pod's service
    account (in-cluster)."""
    from kubernetes import client, config

    path = str(kubeconfig or os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser())
    if any(Path(p).expanduser().is_file() for p in path.split(os.pathsep) if p):
        try:
            return client.CustomObjectsApi(config.new_client_from_config(config_file=path, persist_config=False))
        except config.ConfigException as err:
            raise InferenceServiceError(f"the kubeconfig {path} cannot be used ({err}); fix it or set KUBECONFIG "
                                        "(or --kubeconfig) to another") from None
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException as err:
        raise InferenceServiceError(
            f"no Kubernetes configuration: no kubeconfig at {path} and not in a pod with a service account ({err}); "
            "set KUBECONFIG (or --kubeconfig) to a kubeconfig file") from None
    return client.CustomObjectsApi(client.ApiClient(configuration))


def is_transient_kubernetes(error: BaseException) -> bool:
    """Worth another try: the API server unreachable or overloaded, or a concurrent change (409) to re-read."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(error, ApiException):
        return error.status in (409, 429) or (error.status or 0) >= 500
    return isinstance(error, HTTPError) or is_transient(error)


def _replace(api: Any, target: InferenceServiceRef, storage_uri: str) -> dict[str, Any]:
    """Read, modify, replace: the replace carries the resourceVersion read, so a concurrent change fails (409)
    instead of being overwritten, and the retry reads it again."""
    args = (GROUP, API_VERSION, target.namespace, PLURAL, target.name)
    current = api.get_namespaced_custom_object(*args, _request_timeout=REQUEST_TIMEOUT_S)
    if storage_uri_of(current, target.container) == storage_uri:
        return current  # already served: no new revision
    updated = with_storage_uri(current, storage_uri, target.container)
    return api.replace_namespaced_custom_object(*args, updated, _request_timeout=REQUEST_TIMEOUT_S)


def _api_message(error: Any) -> str:
    try:
        return json.loads(error.body).get("message") or str(error.reason)
    except (TypeError, ValueError, AttributeError):
        return str(error.reason)


def _explain(error: Any, target: InferenceServiceRef, retry_s: float) -> InferenceServiceError:
    """One readable message for a failed API call (``error``: an ``ApiException``)."""
    where, detail = f"InferenceService {target}", _api_message(error)
    if error.status == 404:
        return InferenceServiceError(f"{where} not found ({detail}); check the name and namespace "
                                     f"(kubectl get inferenceservices -n {target.namespace}) and that KServe is installed")
    if error.status == 403:
        return InferenceServiceError(
            f"{where}: forbidden ({detail}); the service account needs the verbs {RBAC_VERBS} on "
            f"inferenceservices.{GROUP} in namespace {target.namespace} (apply infra/kserve/rbac.yaml)")
    if error.status == 401:
        return InferenceServiceError(f"{where}: the Kubernetes API refused the credentials ({detail}); "
                                     "renew the kubeconfig's token or certificate")
    retried = f" (still after retrying for {retry_s:.0f} s)" if is_transient_kubernetes(error) else ""
    return InferenceServiceError(f"{where}: the Kubernetes API answered {error.status} ({detail}){retried}")


def point_inference_service(target: InferenceServiceRef, storage_uri: str, *, retry_s: float = 60.0,
                            kubeconfig: str | Path | None = None, api: Any | None = None) -> dict[str, Any]:
    """Serve ``storage_uri`` (``ModelRegistry.version_uri(v)``) from ``target``; returns the InferenceService.

    Idempotent: an InferenceService already serving ``storage_uri`` is left alone (no new revision).
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    api = api if api is not None else custom_objects_api(kubeconfig)
    try:
        service = retrying(is_transient_kubernetes, retry_s)(_replace, api, target, storage_uri)
    except ApiException as err:
        raise _explain(err, target, retry_s) from err
    except (HTTPError, ConnectionError, TimeoutError) as err:
        raise InferenceServiceError(
            f"InferenceService {target}: the Kubernetes API server did not answer (still after retrying for "
            f"{retry_s:.0f} s: {type(err).__name__}); check the cluster and retry") from err
    log.info("InferenceService %s now serves %s", target, storage_uri)
    return service
