"""Release: ``publish`` a packaged version folder (:mod:`.package`) to the registry (immutable), ``promote`` it (a
conditional write of the production pointer) and point the configured KServe InferenceService at it. No torch here:
these tasks only move files and pointers.

One version per night and dataset, so a rerun of the night publishes and promotes nothing twice; a failure to point
serving never undoes the promotion (the result's ``serving.warning`` says what to retry).
"""

from __future__ import annotations

import logging

from mavias.errors import UserError
from mavias.ops.nightly.artifacts import Dataset, Evaluated, Packaged, Promoted, Published, Serving
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import registry
from mavias.ops.registry import CorruptPointer, ModelRegistry, VersionExists
from mavias.ops.registry.kubernetes import point_inference_service

log = logging.getLogger(__name__)


def model_version(dataset: Dataset) -> str:
    """One version per night and dataset: a rerun of the night publishes (and promotes) nothing twice."""
    return f"{dataset['night']}-{dataset['digest'][:8]}"


def version_origin(version: str) -> tuple[str, str]:
    """(night, first 8 characters of the dataset digest) of a version named by :func:`model_version`."""
    night, _, short_digest = version.partition("-")
    return night, short_digest


def publish(cfg: NightlyConfig, packaged: Packaged) -> Published:
    """Upload the version folder to ``models/<name>/<version>/`` (immutable; a rerun finds it published)."""
    reg = registry(cfg, step="publish")
    version = packaged["version"]
    try:
        uri = reg.publish_version(packaged["dir"], version)
    except VersionExists:
        if version not in reg.versions():
            raise
        if (there := reg.published_onnx_sha256(version)) is None:
            raise VersionExists(f"{reg.version_uri(version)} was published before, but its model card cannot be "
                                "read to tell whether it is tonight's model: check that folder, or run a new night"
                                ) from None
        if there != packaged["onnx_sha256"]:
            raise VersionExists(
                f"{reg.version_uri(version)} was published before from another model (ONNX sha256 {there[:12]}, "
                f"tonight's candidate {packaged['onnx_sha256'][:12]}): the candidate was trained again after that "
                f"publish. Nothing was promoted; promote the published one with `mavias registry promote {version} "
                f"--name {cfg.model_name}`, or run a new night to publish tonight's") from None
        log.info("%s was published before (rerun of the night)", version)
        uri = reg.version_uri(version)
    return {"version": version, "uri": uri}


def promote(cfg: NightlyConfig, published: Published, evaluated: Evaluated) -> Promoted:
    """Point production at the version, atomically, unless production changed since it was evaluated; then point
    the configured InferenceService at it (also on a rerun that finds it in production already)."""
    reg = registry(cfg, step="promote")
    version = published["version"]
    try:
        current = reg.production()
    except CorruptPointer as err:
        return {"version": version, "promoted": False, "reason": f"not promoted: {err}", "uri": published["uri"]}
    if current is not None and current.version == version:
        # a retry whose first try moved the pointer and was killed: the promotion over what tonight evaluated against
        # is tonight's (versions are a night's own); a rerun of the whole night evaluated against this version itself
        earlier_try = current.previous_version == evaluated["production_version"]
        return {"version": version, "promoted": earlier_try, "previous": current.previous_version,
                "reason": "" if earlier_try else f"{version} was already in production (rerun)",
                "uri": published["uri"], "serving": point_serving(cfg, reg, version), "in_production": True}
    if reg.promote(version, evaluated["production_etag"]):
        log.info("model %s: %s is production", cfg.model_name, version)
        return {"version": version, "promoted": True, "previous": evaluated["production_version"], "reason": "",
                "uri": published["uri"], "serving": point_serving(cfg, reg, version), "in_production": True}
    reason = "production changed after tonight's evaluation (a concurrent promotion or rollback won): not promoted"
    return {"version": version, "promoted": False, "reason": reason, "uri": published["uri"]}


def point_serving(cfg: NightlyConfig, reg: ModelRegistry, version: str) -> Serving | None:
    """Point ``cfg.serving.inference_service`` (if any) at production ``version``. A failure is recorded in the
    result's ``warning`` (with the command to retry), never raised: the promotion stands."""
    target = cfg.serving.inference_service
    if target is None:
        return None
    uri = reg.version_uri(version)
    if (moved := _production_moved(reg, version)) is not None:
        log.warning("%s", moved)
        return {"inference_service": str(target), "uri": uri, "pointed": False, "warning": moved}
    try:
        point_inference_service(target, uri, retry_s=cfg.serving.retry_s)
    except Exception as err:  # noqa: BLE001 - whatever the Kubernetes API does, the promotion must stand
        warning = (f"serving NOT updated: production is {version}, but InferenceService {target} could not be "
                   f"pointed at it and still serves the previous version: {err}. "
                   f"Retry: {target.point_command(cfg.model_name, version)}")
        log.error("%s", warning, exc_info=not isinstance(err, UserError))
        return {"inference_service": str(target), "uri": uri, "pointed": False, "warning": warning}
    return {"inference_service": str(target), "uri": uri, "pointed": True, "warning": ""}


def _production_moved(reg: ModelRegistry, version: str) -> str | None:
    """Why serving must not follow ``version`` any more: production moved on since it was promoted (an operator's
    rollback, a later promotion), read again right before the InferenceService would change; else None."""
    try:
        current = reg.production()
    except CorruptPointer as err:
        return f"serving NOT updated: the production pointer cannot be read ({err})"
    if current is not None and current.version == version:
        return None
    now = current.version if current else "unset"
    return (f"serving NOT updated: production is {now} now, not {version} (it changed after this promotion, e.g. a "
            f"rollback); serving stays with whoever changed it (`mavias registry point` sets it to production)")


def serving_problem(promoted: Promoted | None) -> str | None:
    """The warning of a promotion whose InferenceService was not pointed at it, else ``None``."""
    serving = (promoted or {}).get("serving")
    return serving["warning"] if serving and not serving["pointed"] else None
