"""Train and evaluate as the paper's protocols prescribe; shared by the CLI, the benchmarks and the nightly pipeline.

1. An ERM *reference* model, selected by validation accuracy (paper, open-set protocol).
2. Its biased tags B' on the VALIDATION split (min support) and the tag-derived validation groups.
3. Any method, selected by validation accuracy (paper), by the worst tag-derived group and by ``val_robust``
   (:mod:`mavias.train.selection`; no bias labels involved); every criterion's checkpoint is kept.
4. Evaluation of a checkpoint on a split: open-set groups from B', closed-set groups from attributes when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mavias.evaluate.metrics import MIN_SUPPORT, accuracy, group_key
from mavias.evaluate.protocols import (
    celeba_metrics,
    evaluation_report,
    find_biased_tags,
    imagenet9_metrics,
    openset_groups,
    urbancars_metrics,
)
from mavias.manifest import DatasetInfo
from mavias.train.config import TrainConfig
from mavias.train.data import SplitData
from mavias.train.inference import predict
from mavias.train.prepare import PreparedData
from mavias.train.trainer import Trainer, TrainResult, epoch_path, load_main_model
from mavias.utils.atomic import atomic_path, write_json

BG_ALIGNED, CO_ALIGNED = "attr_bg_aligned", "attr_coobj_aligned"


BIASED_TAGS_FILE = "biased_tags.csv"


@dataclass
class Reference:
    """The ERM reference of the open-set protocol: its biased tags B' and the tag-derived validation groups."""

    checkpoint: Path
    biased_tags: pd.DataFrame
    val_groups: pd.Series
    run: TrainResult | None = None

    @classmethod
    def from_biased_tags(cls, checkpoint: Path, biased: pd.DataFrame, data: PreparedData,
                         run: TrainResult | None = None) -> Reference:
        return cls(checkpoint, biased, tag_groups(data["val"], biased, data.classes), run)

    def kept_epochs(self, epochs: int) -> Path | None:
        """The reference's run folder when it kept all ``epochs`` of its training (``keep_epochs``), else None."""
        run_dir = Path(self.checkpoint).parent
        return run_dir if epoch_path(run_dir, epochs).exists() else None


def tag_groups(split: SplitData, biased: pd.DataFrame, classes: list[str]) -> pd.Series:
    """Open-set groups "<class>|biased" / "<class>|unbiased" of a split's samples."""
    frame = split.frame.assign(label=split.labels.numpy())
    return openset_groups(frame, frame["irrelevant_tags"], biased, classes)


def train_reference(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, *, tag_min_support: int = MIN_SUPPORT,
                    progress: bool = True, keep_epochs: bool = False) -> Reference:
    """The ERM reference; with ``keep_epochs`` its training also serves as the ERM baseline (`erm_baseline`)."""
    cfg = cfg.model_copy(update={"method": "erm", "selection": "val_acc"})
    run = Trainer(cfg, data["train"], data["val"], data.classes, out_dir, progress=progress,
                  keep_epochs=keep_epochs).fit()
    checkpoint = run.checkpoint("val_acc")
    model, _, _ = load_main_model(checkpoint)
    val_pred = predict(model, data["val"])
    biased = find_biased_tags(val_pred, val_pred["irrelevant_tags"], data.classes, min_support=tag_min_support)
    with atomic_path(Path(out_dir) / BIASED_TAGS_FILE) as tmp:
        biased.to_csv(tmp, index=False)
    return Reference.from_biased_tags(checkpoint, biased, data, run)


def load_reference(run_dir: str | Path, data: PreparedData) -> Reference:
    run_dir = Path(run_dir)
    path = run_dir / BIASED_TAGS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not an ERM reference run (mavias train --set method=erm)")
    biased = pd.read_csv(path, keep_default_na=False)
    return Reference.from_biased_tags(run_dir / "best_val_acc.pt", biased, data)


def train_method(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, reference: Reference | None,
                 *, progress: bool = True, stop_after: int | None = None) -> TrainResult:
    if cfg.selection == "val_tag_wg" and reference is None:
        raise ValueError("selection val_tag_wg needs the ERM reference (train_reference) for its tag-derived groups")
    val_groups = None if reference is None else reference.val_groups
    trainer = Trainer(cfg, data["train"], data["val"], data.classes, out_dir, val_groups=val_groups, progress=progress)
    return trainer.fit(stop_after=stop_after)


def erm_baseline(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, reference: Reference) -> TrainResult:
    """The ERM baseline, selected under the reference's tag groups. The reference trains ERM with the same settings
    and seed, so where it kept its epochs they are selected again instead of repeating the training."""
    trainer = Trainer(cfg, data["train"], data["val"], data.classes, out_dir, val_groups=reference.val_groups,
                      progress=False)
    source = reference.kept_epochs(cfg.epochs)
    return trainer.reselect(source) if source is not None else trainer.fit()


def training_proportions(data: PreparedData, attrs: list[str]) -> dict[str, float]:
    names = group_key(data["train"].frame, ["label", *attrs])
    return (names.value_counts() / len(names)).to_dict()


def evaluate_checkpoint(data: PreparedData, checkpoint: str | Path, reference: Reference | None, *, split: str = "test",
                        closed_set_attrs: list[str] | None = None, n_boot: int = 1000, seed: int = 0,
                        dataset: DatasetInfo | None = None) -> dict:
    """Metrics of the main model on a split: overall, open-set (if a reference), closed-set and UrbanCars-style,
    plus the CelebA / ImageNet-9 metrics when ``dataset`` (its ``dataset.json``) declares that protocol."""
    model, classes, _ = load_main_model(checkpoint)
    if classes != data.classes:
        raise ValueError(f"{checkpoint} was trained on classes {classes}, the data has {data.classes}")
    target = data[split]
    pred = predict(model, target)
    result: dict = {"split": split, "checkpoint": str(checkpoint), "n_samples": len(pred),
                    "accuracy": float(pred["correct"].mean()), "tables": {}}
    if reference is not None:
        metrics, table = evaluation_report(pred, tag_groups(target, reference.biased_tags, classes), n_boot=n_boot, seed=seed)
        result["open_set"] = metrics
        result["tables"]["open_set"] = table
    if closed_set_attrs:
        proportions = training_proportions(data, closed_set_attrs)
        groups = group_key(pred.assign(label=pred["label_name"]), ["label", *closed_set_attrs])
        present = {g: proportions.get(g, 0.0) for g in groups.unique()}
        metrics, table = evaluation_report(pred, groups, train_proportions=present, n_boot=n_boot, seed=seed)
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
        with atomic_path(out_dir / f"groups_{protocol}.csv") as tmp:
            table.to_csv(tmp, index=False)
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
    counts = train.groupby(["label", BG_ALIGNED, CO_ALIGNED]).size()
    cells = [(label, bg, co) for label in data.classes for bg in ("0", "1") for co in ("0", "1")]
    return {cell: counts.get(cell, 0) / len(train) for cell in cells}
