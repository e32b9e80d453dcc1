"""A model version's folder as the export writes it: the verified ONNX graph and its model card.

:func:`export_checkpoint` is what ``mavias export`` writes for a run's checkpoint: the same export and verification
as the nightly release (ONNX Runtime vs PyTorch, max |logit diff| <= 1e-4 and identical argmax). A run made with
``mavias train`` has no held-out set on record, so verification uses seeded random images: parity is a property of
the graph, not of the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import TrainConfig, method_name
from mavias.core.train.transforms import describe_eval_preprocessing
from mavias.errors import UserError
from mavias.ops.export.exporter import ExportError, describe_onnx, export_onnx
from mavias.ops.export.parity import verify_onnx
from mavias.ops.export.verification import VerificationResult
from mavias.ops.gates import GateConfig, GateReport
from mavias.ops.registry.model_card import (
    CARD_NAME,
    CARD_SCHEMA_VERSION,
    DataLineage,
    lineage_from_files,
    write_model_card,
)
from mavias.utils.disk import sha256_file

NON_JSON_EVALUATION_KEYS = ("tables", "predictions")  # DataFrames of evaluate_checkpoint
INPUT_NOTE = ("float32 RGB in [0, 1], NCHW, preprocessed as `preprocessing` says; "
              "ImageNet mean/std normalisation is inside the model")
VERIFY_IMAGES, VERIFY_SEED = 64, 0


def evaluation_summary(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON part of an :func:`~mavias.core.protocol.evaluate_checkpoint` result (without its DataFrames)."""
    return {k: v for k, v in evaluation.items() if k not in NON_JSON_EVALUATION_KEYS}


def build_model_card(
    *,
    name: str,
    version: str,
    classes: list[str],
    onnx_path: str | Path,
    verification: VerificationResult,
    evaluation: Mapping[str, Any],
    gates: GateReport,
    train_config: TrainConfig,
    lineage: DataLineage,
    created: datetime | None = None,
) -> dict[str, Any]:
    """A JSON-ready card; the input/output spec and opset are read from the ONNX file itself."""
    onnx_path = Path(onnx_path)
    spec = describe_onnx(onnx_path)
    return {
        "schema_version": CARD_SCHEMA_VERSION,
        "name": name,
        "version": version,
        "created": (created or datetime.now(UTC)).isoformat(),
        "classes": list(classes),
        "input": spec["inputs"][0] | {"note": INPUT_NOTE},
        "preprocessing": describe_eval_preprocessing(train_config),
        "output": spec["outputs"][0] | {"note": "main-model logits z_main, class index = position in classes"},
        "onnx": {
            "file": onnx_path.name,
            "sha256": sha256_file(onnx_path),
            "size_bytes": onnx_path.stat().st_size,
            "opset": spec["opset"],
        },
        "verification": verification.to_dict(),
        "metrics": evaluation_summary(evaluation),
        "gates": gates.to_dict(),
        "training": train_config.model_dump(mode="json") | {"method_name": method_name(train_config)},
        "data_lineage": lineage.model_dump(mode="json"),
    }


def export_verified(model: torch.nn.Module, out: Path, images: torch.Tensor, *,
                    image_size: int) -> tuple[Path, VerificationResult]:
    """Export ``model`` to ``out`` through a staged file that replaces ``out`` only once verified on ``images``: a
    graph that fails its check never replaces a verified one."""
    staged = out.with_name(f".{out.name}.unverified")
    try:
        export_onnx(model, staged, image_size=image_size)
        verification = verify_onnx(staged, model, images)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged.replace(out), verification


def export_checkpoint(checkpoint: Path, out: Path, *, name: str, version: str,
                      evaluation: Mapping[str, Any] | None = None, gates: GateReport | None = None) -> dict[str, Any]:
    """Export, verify and write ``model_card.json`` beside ``out`` (with the ``evaluation`` and ``gates`` that were
    run, when given); return the card."""
    try:
        model, classes, cfg = load_main_model(checkpoint)
        images = torch.randint(0, 256, (VERIFY_IMAGES, 3, cfg.image_size, cfg.image_size), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(VERIFY_SEED))
        onnx_path, verification = export_verified(model, out, images, image_size=cfg.image_size)
    except (ExportError, KeyError, RuntimeError) as err:
        raise UserError(f"cannot export {checkpoint}: {err}") from err
    card = build_model_card(
        name=name, version=version, classes=classes, onnx_path=onnx_path, verification=verification,
        evaluation=evaluation or {}, gates=gates or GateReport(GateConfig(version=1), []), train_config=cfg,
        lineage=lineage_from_files([], {"checkpoint": checkpoint}),
    )
    if gates is None:
        card["gates"] = {"passed": None, "note": "exported from a run folder: no gates were run"}
    write_model_card(out.with_name(CARD_NAME), card)
    return card
