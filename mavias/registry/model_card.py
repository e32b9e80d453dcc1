"""The model card (JSON) published with every model version: what it is, how it was made and how good it is."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from mavias.pipeline.export import VerificationResult, describe_onnx
from mavias.pipeline.gates import GateReport
from mavias.train.config import TrainConfig
from mavias.train.transforms import describe_eval_preprocessing
from mavias.utils.atomic import write_json

CARD_SCHEMA_VERSION = 1
NON_JSON_EVALUATION_KEYS = ("tables", "predictions")  # DataFrames of evaluate_checkpoint
INPUT_NOTE = ("float32 RGB in [0, 1], NCHW, preprocessed as `preprocessing` says; "
              "ImageNet mean/std normalisation is inside the model")


class DataLineage(BaseModel):
    """Which data made the model: the partitions trained on and the sha256 of every input artifact."""

    model_config = ConfigDict(frozen=True)

    partitions: list[str]
    artifacts: dict[str, str]  # artifact name (e.g. "manifest", "relevance", "embeddings") -> sha256


def sha256_file(path: str | Path, *, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


def lineage_from_files(partitions: list[str], artifacts: Mapping[str, str | Path]) -> DataLineage:
    return DataLineage(partitions=sorted(partitions), artifacts={k: sha256_file(p) for k, p in artifacts.items()})


def evaluation_summary(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON part of an :func:`~mavias.workflow.evaluate_checkpoint` result (without its DataFrames)."""
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
        "training": train_config.model_dump(mode="json"),
        "data_lineage": lineage.model_dump(mode="json"),
    }


def write_model_card(path: str | Path, card: Mapping[str, Any]) -> Path:
    """Write the card atomically; it must be strict JSON (no NaN, no numpy scalars), checked before writing."""
    json.dumps(card, allow_nan=False)
    return write_json(path, dict(card))
