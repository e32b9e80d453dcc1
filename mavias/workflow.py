"""Train and evaluate as the paper's protocols prescribe; shared by the CLI, the benchmarks and the nightly pipeline.

1. An ERM *reference* model, selected by validation accuracy (paper, open-set protocol).
2. Its biased tags B' on the VALIDATION split (min support) and the tag-derived validation groups.
3. Any method, selected by validation accuracy (paper), by the worst tag-derived group and by ``val_robust``
   (:mod:`mavias.train.selection`; no bias labels involved); every criterion's checkpoint is kept.
4. Evaluation of a checkpoint on a split: open-set groups from B', closed-set groups from attributes when present.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mavias.errors import UserError
from mavias.evaluate.explain import explain_empty_biased_tags
from mavias.evaluate.metrics import MIN_SUPPORT, accuracy, group_key
from mavias.evaluate.openset import PAPER, find_biased_tags, openset_groups, openset_report
from mavias.evaluate.protocols import celeba_metrics, evaluation_report, imagenet9_metrics, urbancars_metrics
from mavias.evaluate.shortcuts import MAX_Q_VALUE, MIN_ODDS_RATIO, SHORTCUT, SHORTCUT_COLUMNS, find_shortcuts
from mavias.manifest import DatasetInfo
from mavias.train.config import TrainConfig, load_config
from mavias.train.data import SplitData
from mavias.train.distributed import fit_distributed
from mavias.train.inference import predict
from mavias.train.prepare import PreparedData
from mavias.train.trainer import EARLY_CHECKPOINT, Trainer, TrainResult, epoch_path, load_main_model
from mavias.utils.atomic import atomic_path, write_json

BG_ALIGNED, CO_ALIGNED = "attr_bg_aligned", "attr_coobj_aligned"
BIASED_TAGS_FILE = "biased_tags.csv"  # B': one row per biased (class, tag)
EVIDENCE_FILE = "shortcut_evidence.csv"  # every (class, tag) pair tested, with its evidence
PAPER_TAGS_FILE = "biased_tags_paper.csv"  # B' by the paper's rule, reported alongside
DISCOVERY_FILE = "biased_tags.json"  # what B' was computed from (a cache key)
RULES = (SHORTCUT, PAPER)


@dataclass
class Reference:
    """The ERM reference of the open-set protocol: its biased tags B' (default rule, and the paper's alongside) and
    the tag-derived validation groups."""

    checkpoint: Path
    biased_tags: pd.DataFrame
    val_groups: pd.Series
    run: TrainResult | None = None
    paper_biased_tags: pd.DataFrame | None = None
    evidence: pd.DataFrame | None = None

    def kept_epochs(self, epochs: int) -> Path | None:
        """The reference's run folder when it kept all ``epochs`` of its training (``keep_epochs``), else None."""
        run_dir = Path(self.checkpoint).parent
        return run_dir if epoch_path(run_dir, epochs).exists() else None


def tag_groups(split: SplitData, biased: pd.DataFrame, classes: list[str]) -> pd.Series:
    """Open-set groups "<class>|aligned" / "<class>|conflicting" of a split's samples."""
    frame = split.frame.assign(label=split.labels.numpy())
    return openset_groups(frame, frame["irrelevant_tags"], biased, classes)


def discover_biased_tags(data: PreparedData, checkpoint: Path, *, rule: str = SHORTCUT,
                         min_support: int = MIN_SUPPORT) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(B' by ``rule``, the evidence of every pair tested, B' by the paper's rule) from the reference checkpoint's
    validation predictions (and its run's early checkpoint, the bias-amplified proxy, where kept) and the training
    split's tags."""
    if rule not in RULES:
        raise UserError(f"unknown biased-tag rule {rule!r}; use {' or '.join(RULES)}")
    val = predict(load_main_model(checkpoint)[0], data["val"])
    paper = find_biased_tags(val, val["irrelevant_tags"], data.classes, min_support=min_support)
    if rule == PAPER:
        return paper, paper, paper
    early = checkpoint.parent / EARLY_CHECKPOINT
    models = [val] + ([predict(load_main_model(early)[0], data["val"])] if early.is_file() else [])
    train = data["train"].frame
    evidence = find_shortcuts(data["train"].labels.numpy(), train["sample_tags"], train["irrelevant_tags"],
                              val["label"].to_numpy(), val["sample_tags"], [_log_probs(m, data.classes) for m in models],
                              data.classes, min_support=min_support)
    return evidence[evidence["biased"]].reset_index(drop=True), evidence, paper


def _log_probs(pred: pd.DataFrame, classes: list[str]) -> np.ndarray:
    logits = pred[[f"logit_{k}" for k in range(len(classes))]].to_numpy()
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def _fingerprint(data: PreparedData) -> str:
    """What B' depends on besides the checkpoint: the classes and every train/val sample with its tags."""
    digest = hashlib.sha256(json.dumps(data.classes).encode())
    for split in ("train", "val"):
        frame = data[split].frame
        for sample, tags in zip(frame["sample_id"], frame["sample_tags"]):
            digest.update(f"{split}:{sample}:{sorted(tags)}".encode())
    return digest.hexdigest()[:16]


def load_reference(run_dir: str | Path, data: PreparedData, *, rule: str = SHORTCUT,
                       min_support: int = MIN_SUPPORT, run: TrainResult | None = None) -> Reference:
    """Any ERM run folder as the open-set reference: its B' is read from the run when it was computed from the same
    data and settings, else computed from its ``best_val_acc.pt`` and written there."""
    run_dir = Path(run_dir)
    checkpoint = _reference_checkpoint(run_dir, data)
    early = run_dir / EARLY_CHECKPOINT
    key = {"rule": rule, "min_support": min_support, "thresholds": [MAX_Q_VALUE, MIN_ODDS_RATIO],
           "data": _fingerprint(data), "checkpoint": checkpoint.name,
           "checkpoint_mtime": checkpoint.stat().st_mtime_ns,
           "early_mtime": early.stat().st_mtime_ns if early.is_file() else None}
    meta = run_dir / DISCOVERY_FILE
    if meta.is_file() and json.loads(meta.read_text()) == key:
        tables = [pd.read_csv(run_dir / f, keep_default_na=False) for f in (BIASED_TAGS_FILE, EVIDENCE_FILE, PAPER_TAGS_FILE)]
    else:
        tables = list(discover_biased_tags(data, checkpoint, rule=rule, min_support=min_support))
        for name, table in zip((BIASED_TAGS_FILE, EVIDENCE_FILE, PAPER_TAGS_FILE), tables):
            with atomic_path(run_dir / name) as tmp:
                table.to_csv(tmp, index=False)
        write_json(meta, key)
    biased, evidence, paper = tables
    return Reference(checkpoint, biased, tag_groups(data["val"], biased, data.classes), run, paper, evidence)


def _reference_checkpoint(run_dir: Path, data: PreparedData) -> Path:
    checkpoint = reference_checkpoint(run_dir)
    _, classes, _ = load_main_model(checkpoint)
    if classes != data.classes:
        raise UserError(f"the reference {run_dir} was trained on classes {classes}, this data has {data.classes}: "
                        "use a reference trained on this dataset")
    return checkpoint


def reference_checkpoint(run_dir: str | Path) -> Path:
    """The checkpoint of an ERM run folder that can serve as the reference; checked before any data is prepared."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run folder (no config.yaml); pass the --out folder of "
                        "`mavias train --set method=erm`")
    method = load_config(run_dir / "config.yaml").method
    if method != "erm":
        raise UserError(f"{run_dir} is a {method} run; the reference must be an ERM run: "
                        f"mavias train --set method=erm --out REFERENCE_DIR, then --reference REFERENCE_DIR")
    checkpoint = run_dir / "best_val_acc.pt"
    if not checkpoint.is_file():
        raise UserError(f"{checkpoint} does not exist: the reference run has not finished an epoch; "
                        f"train it again with the same --out to resume it")
    return checkpoint


def empty_reason(reference: Reference, data: PreparedData, *, min_support: int = MIN_SUPPORT) -> str | None:
    """Why the reference's B' is empty (None when it is not)."""
    if len(reference.biased_tags):
        return None
    train = data["train"].frame
    summary = Path(reference.checkpoint).parent / "train_summary.json"
    val_acc = json.loads(summary.read_text())["best"].get("val_acc", {}).get("val_acc") if summary.is_file() else None
    names = pd.Series([data.classes[k] for k in data["train"].labels.numpy()], index=train.index)
    evidence = reference.evidence if reference.evidence is not None else pd.DataFrame(columns=SHORTCUT_COLUMNS)
    return explain_empty_biased_tags(names, train["sample_tags"], train["irrelevant_tags"], evidence,
                                     min_support=min_support, reference_val_acc=val_acc,
                                     n_val=len(data["val"]))


def train_reference(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, *, tag_min_support: int = MIN_SUPPORT,
                    rule: str = SHORTCUT, progress: bool = True, keep_epochs: bool = False, nproc: int = 1) -> Reference:
    """The ERM reference; with ``keep_epochs`` its training also serves as the ERM baseline (`erm_baseline`)."""
    cfg = cfg.model_copy(update={"method": "erm", "selection": "val_acc"})
    if nproc > 1:
        run = fit_distributed(data, cfg, out_dir, nproc, keep_epochs=keep_epochs)
    else:
        run = Trainer(cfg, data["train"], data["val"], data.classes, out_dir, progress=progress,
                      keep_epochs=keep_epochs).fit()
    return load_reference(out_dir, data, rule=rule, min_support=tag_min_support, run=run)


def train_method(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, reference: Reference | None,
                 *, progress: bool = True, stop_after: int | None = None, nproc: int = 1) -> TrainResult:
    """Train one run; with ``nproc`` > 1 data-parallel over that many processes (:mod:`mavias.train.distributed`)."""
    if cfg.selection == "val_tag_wg" and reference is None:
        raise ValueError("selection val_tag_wg needs the ERM reference (train_reference) for its tag-derived groups")
    val_groups = None if reference is None else reference.val_groups
    if nproc > 1:
        return fit_distributed(data, cfg, out_dir, nproc, val_groups=val_groups, stop_after=stop_after)
    trainer = Trainer(cfg, data["train"], data["val"], data.classes, out_dir, val_groups=val_groups, progress=progress)
    return trainer.fit(stop_after=stop_after)


def erm_baseline(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, reference: Reference) -> TrainResult:
    """The ERM baseline, selected under the reference's tag groups. The reference trains ERM with the same settings
    and seed, so where it kept its epochs they are selected again instead of repeating the training."""
    trainer = Trainer(cfg, data["train"], data["val"], data.classes, out_dir, val_groups=reference.val_groups,
                      progress=False)
    source = reference.kept_epochs(cfg.epochs)
    return trainer.reselect(source) if source is not None else trainer.fit()


def _open_set(pred: pd.DataFrame, reference: Reference, classes: list[str], n_boot: int, seed: int,
              min_support: int) -> tuple[dict, pd.DataFrame]:
    """Open-set metrics under the reference's B', with the paper rule's B' and its worst group alongside."""
    def report(biased: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
        return openset_report(pred, pred["irrelevant_tags"], pred["sample_tags"], biased, classes, n_boot=n_boot,
                              seed=seed, min_support=min_support)

    metrics, table = report(reference.biased_tags)
    rule = str(reference.biased_tags["rule"].iloc[0]) if len(reference.biased_tags) else SHORTCUT
    metrics.update(protocol="open-set", biased_tag_rule=rule, n_biased_tags=len(reference.biased_tags),
                   biased_tags=_pairs(reference.biased_tags))
    if reference.paper_biased_tags is not None:
        paper, _ = report(reference.paper_biased_tags)
        metrics["paper_rule"] = {"n_biased_tags": len(reference.paper_biased_tags),
                                 "biased_tags": _pairs(reference.paper_biased_tags),
                                 "worst_group": paper["worst_group"],
                                 "worst_group_accuracy": paper["worst_group_accuracy"]}
    return metrics, table


def _pairs(biased: pd.DataFrame) -> list[list[str]]:
    return [[str(c), str(t)] for c, t in zip(biased["class"], biased["tag"])]


def training_proportions(data: PreparedData, attrs: list[str]) -> dict[str, float]:
    names = group_key(data["train"].frame, ["label", *attrs])
    return (names.value_counts() / len(names)).to_dict()


def evaluate_checkpoint(data: PreparedData, checkpoint: str | Path, reference: Reference | None, *, split: str = "test",
                        closed_set_attrs: list[str] | None = None, n_boot: int = 1000, seed: int = 0,
                        dataset: DatasetInfo | None = None, min_support: int = MIN_SUPPORT) -> dict:
    """Metrics of the main model on a split: overall, open-set (if a reference), closed-set and UrbanCars-style,
    plus the CelebA / ImageNet-9 metrics when ``dataset`` (its ``dataset.json``) declares that protocol. Groups of
    fewer than ``min_support`` samples are flagged ``small``."""
    model, classes, _ = load_main_model(checkpoint)
    if classes != data.classes:
        raise ValueError(f"{checkpoint} was trained on classes {classes}, the data has {data.classes}")
    target = data[split]
    pred = predict(model, target)
    result: dict = {"split": split, "checkpoint": str(checkpoint), "n_samples": len(pred),
                    "accuracy": float(pred["correct"].mean()), "tables": {}}
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
