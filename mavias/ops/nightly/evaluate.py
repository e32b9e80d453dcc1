"""Evaluate: the candidate, the ERM reference and the current production model on the fixed evaluation set, with
the same groups, for the quality gates (the ``quality_gates`` task: :class:`mavias_airflow.operators.QualityGateOperator`
over :func:`mavias.ops.gates.evaluate_gates`) and the report; and why each class has the shortcuts it has in B', or none
(``shortcut_status.csv``, :func:`mavias.core.evaluate.shortcut_status.class_status`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
from botocore.client import BaseClient

from mavias.core.evaluate.explain import empty_group_caveats
from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.evaluate.shortcut_status import class_status
from mavias.core.protocol import Reference, evaluate_checkpoint, load_reference, write_run_evaluation
from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.inference import predict
from mavias.core.train.prepare import PreparedData
from mavias.ops.nightly.artifacts import Candidate, Dataset, Evaluated, TrainedReference
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.dataset import load_prepared
from mavias.ops.nightly.layout import CHECKPOINT_NAME, layout, registry, s3_client
from mavias.ops.registry import CorruptPointer, PointerRecord
from mavias.ops.reporting.plots import bias_alignment, logit_summary
from mavias.storage.s3 import download_file
from mavias.utils.csvfile import write_csv

SHORTCUT_STATUS = "shortcut_status.csv"


def _production_checkpoint(cfg: NightlyConfig, client: BaseClient, version: str) -> Path:
    reg = registry(cfg, client)
    path = layout(cfg).production(version) / CHECKPOINT_NAME
    if not path.exists():
        download_file(client, cfg.s3, f"{reg.prefix}{version}/{CHECKPOINT_NAME}", path)
    return path


def _logit_summaries(data: PreparedData, biased: pd.DataFrame, checkpoints: Mapping[str, str | Path]) -> pd.DataFrame:
    """Mean training-sample logits of bias-aligned and bias-conflicting samples, per model (the paper's logit plot)."""
    rows = []
    for name, checkpoint in checkpoints.items():
        pred = predict(load_main_model(checkpoint)[0], data["train"])
        rows.append(logit_summary(pred, bias_alignment(pred["label_name"], pred["irrelevant_tags"], biased), model=name))
    return pd.concat(rows, ignore_index=True)


def shortcut_status(data: PreparedData, ref: Reference, evaluation_labels: pd.Series) -> pd.DataFrame:
    """Per class: its shortcuts, or why it has none (:func:`class_status`), with the reference's validation accuracy
    on the class and the class's images in the evaluation set."""
    val = predict(load_main_model(ref.checkpoint)[0], data["val"])
    accuracy = val.groupby("label_name")["correct"].mean().to_dict()
    train = data["train"]
    return class_status(data.classes, train.labels.numpy(), train.frame["irrelevant_tags"], ref.evidence,
                        min_support=MIN_SUPPORT, reference_accuracy=accuracy,
                        eval_counts=evaluation_labels.value_counts().to_dict())


def _production_and_etag(cfg: NightlyConfig, client: BaseClient, notes: list[str]) -> tuple[PointerRecord | None, str | None]:
    """Production and the pointer's ETag; a corrupt pointer is a note (promotion then refuses, the night fails
    visibly), not a crash."""
    reg = registry(cfg, client)
    try:
        return reg.production_and_etag()
    except CorruptPointer as err:
        notes.append(str(err))
        return None, None


def evaluate(cfg: NightlyConfig, dataset: Dataset, reference: TrainedReference, candidate: Candidate) -> Evaluated:
    """Candidate, ERM reference and current production model on the fixed evaluation set, with the same groups.

    Records the production pointer's ETag: promotion later succeeds only if production has not changed since.
    """
    client = s3_client(cfg, "evaluate")
    data = load_prepared(dataset)
    ref = load_reference(reference["dir"], data)
    out = layout(cfg).night(dataset["night"]) / "eval"

    def run(role: str, checkpoint: str | Path) -> str:
        result = evaluate_checkpoint(data, checkpoint, ref, closed_set_attrs=cfg.evaluation.closed_set_attrs or None,
                                     n_boot=cfg.evaluation.n_boot)
        return str(write_run_evaluation(out / role, result) / "metrics.json")

    metrics = {"candidate": run("candidate", candidate["checkpoint"]), "reference": run("reference", ref.checkpoint)}
    notes: list[str] = []
    production, pointer_etag = _production_and_etag(cfg, client, notes)
    problem, not_compared = (notes[0] if notes else None), None
    notes += empty_group_caveats(json.loads(Path(metrics["candidate"]).read_text()).get("open_set", {}), "label-free")
    if production is not None:
        try:
            metrics["production"] = run("production", _production_checkpoint(cfg, client, production.version))
        except ValueError as err:  # e.g. production was trained on other classes: not comparable
            not_compared = f"production {production.version} could not be compared: {err}"
            notes.append(not_compared)
    summary = _logit_summaries(data, ref.biased_tags, {"ERM reference": ref.checkpoint,
                                                        "MAVias": candidate["checkpoint"]})
    write_csv(summary, out / "logit_summary.csv")
    write_csv(shortcut_status(data, ref, data["test"].frame["label"]), out / SHORTCUT_STATUS)
    return {
        "candidate": metrics["candidate"],
        "reference": metrics["reference"],
        "production": metrics.get("production"),
        "production_version": production.version if production else None,
        "production_etag": pointer_etag,
        "production_not_compared": not_compared,
        "logit_summary": str(out / "logit_summary.csv"),
        "shortcut_status": str(out / SHORTCUT_STATUS),
        "production_problem": problem,
        "notes": notes,
    }
