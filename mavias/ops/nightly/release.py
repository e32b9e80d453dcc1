"""Release: ``package`` the candidate as a version folder (ONNX of backbone + head verified against PyTorch, the
checkpoint, metrics, gates, model card), ``publish`` it to the registry (immutable), ``promote`` it (a conditional
write of the production pointer) and point the configured KServe InferenceService at it.

One version per night and dataset, so a rerun of the night publishes and promotes nothing twice; a failure to point
serving never undoes the promotion (the result's ``serving.warning`` says what to retry).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch

from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.prepare import PreparedData
from mavias.errors import UserError
from mavias.ops.export.exporter import export_onnx
from mavias.ops.export.latency import export_latency_benchmark
from mavias.ops.export.parity import verify_onnx
from mavias.ops.export.version import build_model_card
from mavias.ops.gates import GateReport
from mavias.ops.nightly.artifacts import Candidate, Dataset, Evaluated, Gates, Packaged, Promoted, Published, Serving
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.dataset import VERSION_DATASET, load_prepared
from mavias.ops.nightly.layout import CHECKPOINT_NAME, layout, registry
from mavias.ops.registry import CorruptPointer, ModelRegistry, VersionExists
from mavias.ops.registry.kubernetes import point_inference_service
from mavias.ops.registry.model_card import CARD_NAME, lineage_from_files, write_model_card
from mavias.utils.atomic import write_json

log = logging.getLogger(__name__)

VERIFY_IMAGES = 256
LATENCY_BUDGET_S = 3.0


def model_version(dataset: Dataset) -> str:
    """One version per night and dataset: a rerun of the night publishes (and promotes) nothing twice."""
    return f"{dataset['night']}-{dataset['digest'][:8]}"


def version_origin(version: str) -> tuple[str, str]:
    """(night, first 8 characters of the dataset digest) of a version named by :func:`model_version`."""
    night, _, short_digest = version.partition("-")
    return night, short_digest


def _held_out_images(data: PreparedData, limit: int = VERIFY_IMAGES) -> torch.Tensor:
    inputs = data["test"].inputs
    return torch.stack([inputs[i] for i in range(min(limit, len(inputs)))])


def package(cfg: NightlyConfig, dataset: Dataset, candidate: Candidate, evaluated: Evaluated, gates: Gates) -> Packaged:
    """The version folder: ONNX of backbone + head (verified against PyTorch), checkpoint, metrics, gates, card."""
    version = model_version(dataset)
    out = layout(cfg).night(dataset["night"]) / "package" / version
    model, classes, train_cfg = load_main_model(candidate["checkpoint"])
    onnx_path = export_onnx(model, out / "model.onnx", image_size=train_cfg.image_size)
    verification = verify_onnx(onnx_path, model, _held_out_images(load_prepared(dataset)))
    latency = export_latency_benchmark(model, train_cfg.image_size, runs=cfg.report.latency_runs, budget_s=LATENCY_BUDGET_S)
    shutil.copyfile(candidate["checkpoint"], out / CHECKPOINT_NAME)
    write_json(out / "classes.json", classes)
    write_json(out / VERSION_DATASET, {"digest": dataset["digest"], "partitions": dataset["partitions"]})
    write_json(out / "latency.json", latency)
    write_json(out / "gates.json", dict(gates))
    shutil.copyfile(evaluated["candidate"], out / "metrics.json")
    dataset_dir = Path(dataset["dir"]) / "dataset"
    lineage = lineage_from_files(
        dataset["partitions"], {name: dataset_dir / f"{name}.parquet" for name in ("manifest", "tags", "relevance")}
    )
    card = build_model_card(
        name=cfg.model_name, version=version, classes=classes, onnx_path=onnx_path, verification=verification,
        evaluation=json.loads(Path(evaluated["candidate"]).read_text()), gates=GateReport.from_dict(gates),
        train_config=train_cfg, lineage=lineage,
    )
    write_model_card(out / CARD_NAME, card)
    log.info("packaged %s: ONNX max |diff| %.2e, latency %s", version, verification.max_abs_diff, latency["results"])
    return {"version": version, "dir": str(out), "onnx": str(onnx_path), "onnx_sha256": card["onnx"]["sha256"],
            "verification": verification.to_dict(), "latency": latency}


def publish(cfg: NightlyConfig, packaged: Packaged) -> Published:
    """Upload the version folder to ``models/<name>/<version>/`` (immutable; a rerun finds it published)."""
    reg = registry(cfg, step="publish")
    version = packaged["version"]
    try:
        uri = reg.publish_version(packaged["dir"], version)
    except VersionExists:
        if version not in reg.versions():
            raise
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
        return {"version": version, "promoted": False, "reason": f"{version} was already in production (rerun)",
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
