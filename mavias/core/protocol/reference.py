"""The ERM reference of the open-set protocol (paper, §Evaluation): any ERM run, its biased tags B' (the label-free
shortcut rule, and the paper's rule alongside) computed from its validation predictions, and the tag-derived groups
they give; cached in the run folder for the data they were computed from."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mavias.core.evaluate.explain import explain_empty_biased_tags
from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.evaluate.openset import PAPER, find_biased_tags, openset_groups
from mavias.core.evaluate.shortcuts import (
    MAX_Q_VALUE,
    MIN_CROSS_AUC,
    MIN_CROSS_SUPPORT,
    MIN_ODDS_RATIO,
    MIN_SIDE,
    RULE_VERSION,
    SHORTCUT,
    SHORTCUT_COLUMNS,
    Predictions,
    find_shortcuts,
)
from mavias.core.protocol.crossfit import cross_fitted, log_probs_path
from mavias.core.protocol.reference_files import BIASED_TAGS_FILE, DISCOVERY_FILE, EVIDENCE_FILE, PAPER_TAGS_FILE
from mavias.core.train.checkpoints import EARLY_CHECKPOINT, best_checkpoint, epoch_path, load_main_model
from mavias.core.train.config import load_config
from mavias.core.train.data import SplitData
from mavias.core.train.inference import predict
from mavias.core.train.prepare import PreparedData
from mavias.core.train.trainer import TrainResult
from mavias.errors import UserError
from mavias.utils.atomic import write_json
from mavias.utils.csvfile import read_csv, write_csv

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


def compute_biased_tags(data: PreparedData, checkpoint: Path, *, rule: str = SHORTCUT,
                         min_support: int = MIN_SUPPORT) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(B' by ``rule``, the evidence of every pair tested, B' by the paper's rule) from the reference checkpoint's
    validation predictions (and its run's early checkpoint, the bias-amplified proxy, where kept; and the cross-fitted
    references' training-split predictions, where made) and the training split's tags."""
    if rule not in RULES:
        raise UserError(f"unknown biased-tag rule {rule!r}; use {' or '.join(RULES)}")
    val = predict(load_main_model(checkpoint)[0], data["val"])
    paper = find_biased_tags(val, val["irrelevant_tags"], data.classes, min_support=min_support)
    if rule == PAPER:
        return paper, paper, paper
    train = data["train"]
    predictions = [_validation(val, "reference", data.classes)]
    early = checkpoint.parent / EARLY_CHECKPOINT
    if early.is_file():
        predictions.append(_validation(predict(load_main_model(early)[0], data["val"]), "early", data.classes))
    if (folds := cross_fitted(checkpoint.parent, train)) is not None:
        predictions.append(folds)
    evidence = find_shortcuts(train.labels.numpy(), train.frame["sample_tags"], train.frame["irrelevant_tags"],
                              predictions, data.classes, min_support=min_support)
    return evidence[evidence["biased"]].reset_index(drop=True), evidence, paper


def _validation(pred: pd.DataFrame, name: str, classes: list[str]) -> Predictions:
    return Predictions(name, pred["label"].to_numpy(), pred["sample_tags"], _log_probs(pred, classes))


def _log_probs(pred: pd.DataFrame, classes: list[str]) -> np.ndarray:
    logits = pred[[f"logit_{k}" for k in range(len(classes))]].to_numpy()
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def _fingerprint(data: PreparedData) -> str:
    """What B' depends on besides the checkpoint: the classes and every train/val sample with its tags and which of
    them were judged irrelevant (a reviewed decision changes B' without changing a tag)."""
    digest = hashlib.sha256(json.dumps(data.classes).encode())
    for split in ("train", "val"):
        frame = data[split].frame
        for sample, tags, irrelevant in zip(frame["sample_id"], frame["sample_tags"], frame["irrelevant_tags"]):
            digest.update(f"{split}:{sample}:{sorted(tags)}:{sorted(irrelevant)}".encode())
    return digest.hexdigest()[:16]


def load_reference(run_dir: str | Path, data: PreparedData, *, rule: str = SHORTCUT,
                       min_support: int = MIN_SUPPORT, run: TrainResult | None = None) -> Reference:
    """Any ERM run folder as the open-set reference: its B' is read from the run when it was computed from the same
    data and settings, else computed from its ``best_val_acc.pt`` and written there."""
    run_dir = Path(run_dir)
    checkpoint = _reference_checkpoint(run_dir, data)
    early = run_dir / EARLY_CHECKPOINT
    folds = log_probs_path(run_dir)
    thresholds = [MAX_Q_VALUE, MIN_ODDS_RATIO, MIN_CROSS_AUC, MIN_CROSS_SUPPORT, MIN_SIDE]
    key = {"rule": rule, "rule_version": RULE_VERSION, "min_support": min_support, "thresholds": thresholds,
           "data": _fingerprint(data), "checkpoint": checkpoint.name,
           "checkpoint_mtime": checkpoint.stat().st_mtime_ns,
           "early_mtime": early.stat().st_mtime_ns if early.is_file() else None,
           "cross_fit_mtime": folds.stat().st_mtime_ns if folds.is_file() else None}
    meta = run_dir / DISCOVERY_FILE
    if meta.is_file() and json.loads(meta.read_text()) == key:
        tables = [read_csv(run_dir / f, keep_default_na=False) for f in (BIASED_TAGS_FILE, EVIDENCE_FILE, PAPER_TAGS_FILE)]
    else:
        tables = list(compute_biased_tags(data, checkpoint, rule=rule, min_support=min_support))
        for name, table in zip((BIASED_TAGS_FILE, EVIDENCE_FILE, PAPER_TAGS_FILE), tables):
            write_csv(table, run_dir / name)
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
    checkpoint = best_checkpoint(run_dir, "val_acc")
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
