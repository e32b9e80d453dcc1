"""Package: the candidate as a version folder (ONNX of backbone + head verified against PyTorch, the checkpoint,
metrics, gates, model card), named by :func:`~mavias.ops.nightly.release.model_version` for ``publish`` to upload.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch

from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.prepare import PreparedData
from mavias.ops.export.latency import export_latency_benchmark
from mavias.ops.export.version import build_model_card, export_verified
from mavias.ops.gates import GateReport
from mavias.ops.nightly.artifacts import Candidate, Dataset, Evaluated, Gates, Packaged
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.dataset import VERSION_DATASET, load_prepared
from mavias.ops.nightly.layout import CHECKPOINT_NAME, layout
from mavias.ops.nightly.release import model_version
from mavias.ops.registry.model_card import CARD_NAME, lineage_from_files, write_model_card
from mavias.ops.registry.model_registry import GATES_NAME
from mavias.utils.atomic import write_json
from mavias.utils.disk import sha256_file

log = logging.getLogger(__name__)

VERIFY_IMAGES = 256
LATENCY_BUDGET_S = 3.0


def _held_out_images(data: PreparedData, limit: int = VERIFY_IMAGES) -> torch.Tensor:
    inputs = data["test"].inputs
    return torch.stack([inputs[i] for i in range(min(limit, len(inputs)))])


def package(cfg: NightlyConfig, dataset: Dataset, candidate: Candidate, evaluated: Evaluated, gates: Gates) -> Packaged:
    """The version folder: ONNX of backbone + head (verified against PyTorch), checkpoint, metrics, gates, card. A
    folder packaged before from the same checkpoint is kept as it is: its files may be half-published already, and a
    new latency measurement or card time would make the version differ from its own upload."""
    version = model_version(dataset)
    out = layout(cfg).night(dataset["night"]) / "package" / version
    record, inputs = out.parent / f"{version}.packaged.json", _inputs(candidate, evaluated, gates)
    if (packaged := packaged_before(record, inputs)) is not None:
        log.info("%s was packaged before from the same checkpoint, metrics and gates: kept", version)
        return packaged
    model, classes, train_cfg = load_main_model(candidate["checkpoint"])
    onnx_path, verification = export_verified(model, out / "model.onnx", _held_out_images(load_prepared(dataset)),
                                              image_size=train_cfg.image_size)
    latency = export_latency_benchmark(model, train_cfg.image_size, runs=cfg.report.latency_runs,
                                       budget_s=LATENCY_BUDGET_S)
    shutil.copyfile(candidate["checkpoint"], out / CHECKPOINT_NAME)
    write_json(out / "classes.json", classes)
    write_json(out / VERSION_DATASET, {"digest": dataset["digest"], "partitions": dataset["partitions"]})
    write_json(out / "latency.json", latency)
    write_json(out / GATES_NAME, dict(gates))
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
    packaged: Packaged = {"version": version, "dir": str(out), "onnx": str(onnx_path),
                          "onnx_sha256": card["onnx"]["sha256"], "verification": verification.to_dict(),
                          "latency": latency}
    write_json(record, {"inputs": inputs, "packaged": packaged})  # last: the folder is complete
    return packaged


def _inputs(candidate: Candidate, evaluated: Evaluated, gates: Gates) -> dict[str, str]:
    """What a version folder is made of: the checkpoint, its metrics and the gates' verdict."""
    return {"checkpoint": sha256_file(candidate["checkpoint"]), "metrics": sha256_file(evaluated["candidate"]),
            "gates": json.dumps(dict(gates), sort_keys=True, default=str)}


def packaged_before(record: Path, inputs: dict[str, str]) -> Packaged | None:
    """What an earlier run packaged from these very ``inputs`` (``record``, written once its folder was complete), if
    its ONNX model is still there as it was packaged."""
    try:
        document = json.loads(record.read_text())
        packaged = document["packaged"]
        same = document["inputs"] == inputs and sha256_file(packaged["onnx"]) == packaged["onnx_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return packaged if same else None
