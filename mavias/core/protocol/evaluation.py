"""A checkpoint evaluated on a split: overall accuracy, open-set groups from the reference's B', closed-set groups
from attributes where present, and the dataset protocols' own metrics (UrbanCars, CelebA, ImageNet-9)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mavias.core.evaluate.dataset_metrics import (
    as_bool,
    celeba_metrics,
    evaluation_report,
    imagenet9_metrics,
    urbancars_metrics,
)
from mavias.core.evaluate.metrics import MIN_SUPPORT, accuracy, group_key
from mavias.core.evaluate.openset import openset_report
from mavias.core.evaluate.shortcuts import SHORTCUT
from mavias.core.manifest import DatasetInfo
from mavias.core.protocol.reference import Reference
from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.inference import predict
from mavias.core.train.prepare import PreparedData
from mavias.errors import UserError
from mavias.utils.atomic import atomic_path, write_json
from mavias.utils.csvfile import write_csv

BG_ALIGNED, CO_ALIGNED = "attr_bg_aligned", "attr_coobj_aligned"


def _open_set(pred: pd.DataFrame, reference: Reference, classes: list[str], n_boot: int, seed: int,
              min_support: int) -> tuple[dict, pd.DataFrame]:
    """Open-set metrics under the reference's B' (aligned, conflicting and decoy groups), with the paper's 2·p groups
    (aligned and conflicting only) beside them, and the paper's whole protocol (its rule's B', its groups)."""
    def report(biased: pd.DataFrame, decoys: bool = True) -> tuple[dict, pd.DataFrame]:
        return openset_report(pred, pred["irrelevant_tags"], pred["sample_tags"] if decoys else None, biased, classes,
                              n_boot=n_boot, seed=seed, min_support=min_support)

    metrics, table = report(reference.biased_tags)
    rule = str(reference.biased_tags["rule"].iloc[0]) if len(reference.biased_tags) else SHORTCUT
    metrics.update(protocol="open-set", biased_tag_rule=rule, n_biased_tags=len(reference.biased_tags),
                   biased_tags=_pairs(reference.biased_tags),
                   paper_groups=_headline(report(reference.biased_tags, decoys=False)[0]))
    if reference.paper_biased_tags is not None:
        paper, _ = report(reference.paper_biased_tags, decoys=False)
        metrics["paper_rule"] = {"n_biased_tags": len(reference.paper_biased_tags),
                                 "biased_tags": _pairs(reference.paper_biased_tags), **_headline(paper)}
    return metrics, table


def _headline(metrics: dict) -> dict:
    return {key: metrics[key] for key in ("n_groups", "worst_group", "worst_group_accuracy", "average_accuracy")}


def _pairs(biased: pd.DataFrame) -> list[list[str]]:
    return [[str(c), str(t)] for c, t in zip(biased["class"], biased["tag"])]


def training_proportions(data: PreparedData, attrs: list[str]) -> dict[str, float]:
    names = group_key(data["train"].frame, ["label", *attrs])
    return (names.value_counts() / len(names)).to_dict()


class ClassMismatch(UserError, ValueError):
    """A model and data of different class sets: not comparable."""


def evaluate_checkpoint(data: PreparedData, checkpoint: str | Path, reference: Reference | None, *, split: str = "test",
                        closed_set_attrs: list[str] | None = None, n_boot: int = 1000, seed: int = 0,
                        dataset: DatasetInfo | None = None, min_support: int = MIN_SUPPORT) -> dict:
    """Metrics of the main model on a split: overall, open-set (if a reference), closed-set and UrbanCars-style,
    plus the CelebA / ImageNet-9 metrics when ``dataset`` (its ``dataset.json``) declares that protocol. Groups of
    fewer than ``min_support`` samples are flagged ``small``."""
    model, classes, _ = load_main_model(checkpoint)
    if classes != data.classes:
        raise ClassMismatch(f"{checkpoint} was trained on classes {classes}, the data has {data.classes}",
                            hint="evaluate on a manifest of the classes the run was trained on")
    target = data[split]
    pred = predict(model, target)
    result: dict = {"split": split, "checkpoint": str(checkpoint), "n_samples": len(pred),
                    "accuracy": float(pred["correct"].mean()), "tables": {}}
    if "val" in data.splits and split != "val":  # drawn like training: what a model that stopped learning shows
        result["validation_accuracy"] = accuracy(predict(model, data["val"]))
    if reference is not None:
        result["open_set"], result["tables"]["open_set"] = _open_set(pred, reference, classes, n_boot, seed,
                                                                     min_support)
    if closed_set_attrs:
        proportions = training_proportions(data, closed_set_attrs)
        groups = group_key(pred.assign(label=pred["label_name"]), ["label", *closed_set_attrs])
        present = {g: proportions.get(g, 0.0) for g in groups.unique()}
        metrics, table = evaluation_report(pred, groups, train_proportions=present, n_boot=n_boot, seed=seed,
                                           min_support=min_support)
        result["closed_set"] = metrics
        result["tables"]["closed_set"] = table
        if {BG_ALIGNED, CO_ALIGNED} <= set(closed_set_attrs):
            result["urbancars"] = urbancars_metrics(
                pred, BG_ALIGNED, CO_ALIGNED, _alignment_proportions(data), label_col="label_name"
            )
    protocol = dataset.protocol if dataset is not None else "generic"
    if protocol == "celeba" and closed_set_attrs:
        bias = closed_set_attrs[0]
        result["celeba"] = celeba_metrics(pred, bias, aligned_values(data["train"].frame, bias), label_col="label_name")
    if protocol == "imagenet9":
        variants = {s: accuracy(predict(model, data[s])) for s in dataset.eval_splits if s in data.splits}
        result["imagenet9"] = imagenet9_metrics(variants)
    result["predictions"] = pred
    return result


def write_run_evaluation(out_dir: str | Path, result: dict) -> Path:
    """metrics.json (all protocols), groups_<protocol>.csv and predictions.parquet."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for protocol, table in result["tables"].items():
        write_csv(table, out_dir / f"groups_{protocol}.csv")
    with atomic_path(out_dir / "predictions.parquet") as tmp:
        result["predictions"].to_parquet(tmp, index=False)
    write_json(out_dir / "metrics.json", {k: v for k, v in result.items() if k not in ("tables", "predictions")})
    return out_dir


def aligned_values(train: pd.DataFrame, bias_col: str) -> dict[str, str]:
    """The bias-aligned value of each class: its most frequent ``bias_col`` value in training (ties: smallest)."""
    counts = train.groupby(["label", bias_col]).size().reset_index(name="n")
    top = counts.sort_values(["label", "n", bias_col], ascending=[True, False, True]).drop_duplicates("label")
    return dict(zip(top["label"], top[bias_col]))


def _alignment_proportions(data: PreparedData) -> dict[tuple, float]:
    """Training proportion of every (label, bg aligned, co-object aligned) cell; 0 for cells training lacks."""
    train = data["train"].frame
    flags = pd.DataFrame({"label": train["label"], "bg": as_bool(train[BG_ALIGNED]), "co": as_bool(train[CO_ALIGNED])})
    counts = flags.groupby(["label", "bg", "co"]).size()  # the flags as written: 1/0 or true/false
    cells = [(label, bg, co) for label in data.classes for bg in (False, True) for co in (False, True)]
    return {cell: counts.get(cell, 0) / len(train) for cell in cells}
