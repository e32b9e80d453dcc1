"""Cross-fitted references: reliance measured on the training split when the validation split is too small to decide.

A folder of 3 x 200 images leaves 20 validation images per class; with a shortcut on 90% of a class, the within-class
test compares about 18 images with the tag against 2 without and cannot decide. The training split holds eight
times as many. Its samples are split into ``FOLDS`` class-stratified folds; for each, an ERM model with the
reference's resolved recipe (same settings, same epochs, selected by validation accuracy like the reference) trains on
the other folds and predicts the held-out one, un-augmented. Every training sample then has log-probabilities from a
model that never trained on it: a second set of reliance evidence, measured like the validation split's
(:func:`mavias.core.evaluate.shortcuts.reliance`: per pair, the strongest of the sets with the images to decide
it). These models are the reference's stand-ins trained on part of its data; B' still names what such an ERM leans
on. They train like the reference (``fit``: in this process, or data-parallel). The pairs were screened on these same
samples, but by their tag counts alone; the reliance test ranks log-probabilities given those counts, so the
screening leaves its null distribution as it was.

Two folds cost about one more reference training (each fits half the data for the same epochs). It runs only when an
associated pair is undecided, or in B' on a few validation images alone (:func:`needs_cross_fit`), so data with a
large validation split never pays for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from mavias.core.evaluate.shortcuts import CROSS_FITTED, Predictions, is_undecided, rests_on_few
from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.data import SplitData
from mavias.core.train.inference import predict_logits
from mavias.core.train.prepare import PreparedData
from mavias.core.train.trainer import TrainResult
from mavias.utils.atomic import atomic_path, write_json
from mavias.utils.progress import progress_line

FOLDS = 2
CROSSFIT_DIR = "crossfit"
LOG_PROBS_FILE = "log_probs.parquet"  # sample_id, log_prob_<k> of every training sample, out of fold
KEY_FILE = "folds.json"  # the samples and folds the fold runs were trained on


def log_probs_path(run_dir: Path) -> Path:
    return Path(run_dir) / CROSSFIT_DIR / LOG_PROBS_FILE


def needs_cross_fit(evidence: pd.DataFrame | None, run_dir: Path, train: SplitData) -> bool:
    """Whether the validation split left an associated pair undecided, or put one in B' on too few images to decide
    it, and the run is not cross-fitted on this split."""
    if evidence is None or evidence.empty or not (is_undecided(evidence) | rests_on_few(evidence)).any():
        return False
    return cross_fitted(run_dir, train) is None


def fold_of(labels: np.ndarray, seed: int, folds: int = FOLDS) -> np.ndarray:
    """Each sample's fold: within every class a seeded shuffle dealt round-robin, so folds keep the class balance."""
    rng = np.random.default_rng([seed, 77])
    out = np.empty(len(labels), dtype=np.int64)
    for label in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == label))
        out[rows] = np.arange(len(rows)) % folds
    return out


Fit = Callable[[PreparedData, Path], TrainResult]  # trains the reference's recipe on data into a run folder


def cross_fit(data: PreparedData, fit: Fit, seed: int, run_dir: Path, *, progress: bool = False) -> Path:
    """Train the fold models with ``fit`` (``run_dir/crossfit/fold-<k>``, each resumable) and write every training
    sample's out-of-fold log-probabilities; returns that file. Fold runs of other samples or folds are started over."""
    train = data["train"]
    labels = train.labels.numpy()
    folds = fold_of(labels, seed)
    _start_over_unless(Path(run_dir) / CROSSFIT_DIR, train, folds)
    if progress:
        progress_line(f"reference: the validation split is too small to decide whether it leans on some tags; "
                      f"cross-fitting it on the training split ({FOLDS} more ERM trainings on {FOLDS - 1}/{FOLDS} of "
                      "it each)")
    log_probs = np.full((len(train), len(data.classes)), np.nan, dtype=np.float32)
    for k in range(FOLDS):
        held = np.flatnonzero(folds == k)
        fitted = dataclasses.replace(data, splits={**data.splits, "train": train.subset(np.flatnonzero(folds != k))})
        run = fit(fitted, Path(run_dir) / CROSSFIT_DIR / f"fold-{k}")
        log_probs[held] = _out_of_fold(run.checkpoint("val_acc"), train.subset(held))
    table = pd.DataFrame(log_probs, columns=[f"log_prob_{k}" for k in range(len(data.classes))])
    table.insert(0, "sample_id", train.frame["sample_id"].astype(str).to_numpy())
    path = log_probs_path(run_dir)
    with atomic_path(path) as tmp:
        table.to_parquet(tmp, index=False)
    return path


def _start_over_unless(folder: Path, train: SplitData, folds: np.ndarray) -> None:
    """Empty ``folder`` when its fold runs were trained on other samples or folds (a reused run folder)."""
    key = {"samples": hashlib.sha256("\n".join(train.frame["sample_id"].astype(str)).encode()).hexdigest(),
           "folds": hashlib.sha256(folds.tobytes()).hexdigest()}
    path = folder / KEY_FILE
    if path.is_file() and json.loads(path.read_text()) == key:
        return
    shutil.rmtree(folder, ignore_errors=True)
    write_json(path, key)


def _out_of_fold(checkpoint: Path, held: SplitData) -> np.ndarray:
    logits = predict_logits(load_main_model(checkpoint)[0], held.unaugmented())
    return torch.log_softmax(logits, dim=1).numpy()


def cross_fitted(run_dir: Path, train: SplitData) -> Predictions | None:
    """The out-of-fold predictions of a reference run on this training split, or None when it has none for exactly
    these samples (never cross-fitted, or fitted on other data)."""
    path = log_probs_path(run_dir)
    if not path.is_file():
        return None
    table = pd.read_parquet(path)
    if table["sample_id"].tolist() != train.frame["sample_id"].astype(str).tolist():
        return None
    log_probs = table.drop(columns="sample_id").to_numpy()
    return Predictions(CROSS_FITTED, train.labels.numpy(), train.frame["sample_tags"], log_probs)
