"""`mavias bench criteria`: how well each checkpoint-selection criterion ranks checkpoints by test worst-group accuracy.

ERM, SD and six MAVias settings are trained on one benchmark and seed with every epoch kept. Each kept checkpoint is
scored by each criterion on the validation split and by its test worst-group accuracy: analysis only, the product
never selects on test. Reported: the Spearman correlation of each criterion with test WG over all checkpoints, and
the MAVias setting and epoch each criterion would pick. Besides the product's two criteria, three that pool the
likely bias-conflicting validation images across classes, and the true validation worst group for comparison.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from mavias.core.evaluate.metrics import group_key
from mavias.core.evaluate.openset import ALIGNED, CONFLICTING
from mavias.core.protocol import Reference, resolve_run, train_reference
from mavias.core.train.checkpoints import epoch_path, load_main_model
from mavias.core.train.config import TrainConfig
from mavias.core.train.inference import predict
from mavias.core.train.prepare import PreparedData
from mavias.core.train.selection import robust_selection_score
from mavias.core.train.trainer import Trainer
from mavias.tools.bench.suite import choose, default_config, prepare
from mavias.utils.atomic import write_report
from mavias.utils.progress import StepProgress

# the analysis's fixed training settings (a constant learning rate, 12 epochs), so its figures stay reproducible
# patience 0: never stopped early, so the analysis reads every epoch's checkpoint
ANALYSIS_BASE = {"optim": {"name": "sgd", "lr": 0.05, "weight_decay": 1e-4, "schedule": "none"}, "epochs": 12,
                 "patience": 0}
MAVIAS_SETTINGS = [  # (alpha, lambda, projection lr multiplier, lr): the base settings first
    (0.01, 0.5, 1.0, 0.05), (0.01, 0.4, 10.0, 0.05), (0.05, 0.5, 3.0, 0.05), (0.003, 0.7, 10.0, 0.05),
    (0.1, 0.3, 5.0, 0.05), (0.01, 0.5, 1.0, 0.02),
]
CRITERIA = ("val_acc", "val_robust", "reference errors", "pooled unbiased-tag groups", "union of both",
            "true val WG (oracle)")


def settings(base: dict) -> dict[str, dict]:
    """Name -> config overrides of the compared runs."""
    runs = {"ERM": {"method": "erm"}, "SD": {"method": "sd"}}
    for alpha, lam, mult, lr in MAVIAS_SETTINGS:
        runs[f"MAVias α {alpha} λ {lam} g×{mult:g} lr {lr}"] = {
            "method": "mavias", "mavias": {"alpha": alpha, "lam": lam, "projection_lr_mult": mult},
            "optim": {**base["optim"], "lr": lr}}
    return runs


@dataclass(frozen=True)
class Validation:
    """What the criteria read besides a checkpoint's correctness: labels, the reference's tag groups and errors."""

    labels: np.ndarray
    tag_groups: np.ndarray  # "<class>|aligned" / "<class>|conflicting" from the ERM reference's B'
    reference_correct: np.ndarray
    true_groups: np.ndarray  # (class, bias attribute): the oracle's groups, for comparison only

    def pools(self) -> dict[str, np.ndarray]:
        """The likely bias-conflicting images each pooled criterion reads."""
        errors = ~self.reference_correct
        with_biased = {g.split("|")[0] for g in self.tag_groups if g.endswith(f"|{ALIGNED}")}
        unbiased = np.array([g.endswith(f"|{CONFLICTING}") and g.split("|")[0] in with_biased for g in self.tag_groups])
        return {"reference errors": errors, "pooled unbiased-tag groups": unbiased, "union of both": errors | unbiased}


def _group_accuracies(correct: np.ndarray, groups: np.ndarray) -> pd.Series:
    return pd.Series(correct, dtype=float).groupby(groups).mean()


def criterion_scores(correct: np.ndarray, val: Validation) -> dict[str, float]:
    """Every criterion of one checkpoint from its validation correctness."""
    correct = np.asarray(correct, dtype=float)
    balanced = float(_group_accuracies(correct, val.labels).mean())

    def pooled(mask: np.ndarray) -> float:
        return 0.5 * balanced + 0.5 * (float(correct[mask].mean()) if mask.any() else balanced)

    return {"val_acc": float(correct.mean()),
            "val_robust": robust_selection_score(correct, val.labels, val.tag_groups),
            **{name: pooled(mask) for name, mask in val.pools().items()},
            "true val WG (oracle)": float(_group_accuracies(correct, val.true_groups).min())}


def analyse(checkpoints: pd.DataFrame) -> dict:
    """Spearman of each criterion with test WG, and each criterion's pick among the MAVias checkpoints."""
    spearman = {c: float(spearmanr(checkpoints[c], checkpoints["test_wg"]).statistic) for c in CRITERIA}
    mavias = checkpoints[checkpoints["run"].str.startswith("MAVias")]
    picks = []
    for criterion in CRITERIA:
        best = mavias.loc[mavias[criterion].idxmax()]
        picks.append({"criterion": criterion, "run": best["run"], "epoch": int(best["epoch"]),
                      "test_wg": float(best["test_wg"]), "test_balanced": float(best["test_balanced"])})
    return {"spearman": spearman, "picks": picks}


def _folder_name(run: str) -> str:
    """An ASCII folder name: "MAVias α 0.01 λ 0.4 g×10 lr 0.05" -> "mavias-a0.01-l0.4-g10-lr0.05"."""
    ascii_name = run.replace("α ", "a").replace("λ ", "l").replace("g×", "g").replace("lr ", "lr")
    return re.sub(r"[^a-z0-9.]+", "-", ascii_name.lower())


def _true_groups(split, attrs: list[str]) -> np.ndarray:
    return group_key(split.frame.assign(label=split.labels.numpy()), ["label", *attrs]).to_numpy()


def _kept_epochs(data: PreparedData, cfg: TrainConfig, out: Path, reference: Reference) -> Path:
    """The folder holding every epoch of ``cfg``'s training. ERM is the reference's own training (same settings and
    seed): its kept epochs are read where it kept them instead of training it again."""
    if cfg.method == "erm" and (source := reference.kept_epochs(cfg.epochs)) is not None:
        return source
    Trainer(resolve_run(data, cfg, out), data["train"], data["val"], data.classes, out, progress=False,
            keep_epochs=True).fit()
    return out


def _correct(checkpoint: Path, split) -> np.ndarray:
    model, _, _ = load_main_model(checkpoint)
    return predict(model, split)["correct"].to_numpy()


def run_criteria_bench(work: Path, *, benchmark: str = "shape-colours", seed: int = 0,
                       json_path: Path | None = None, progress: bool = False) -> dict:
    start = time.perf_counter()
    bench = choose([benchmark])[0]
    data, _ = prepare(work, bench)
    runs = settings(ANALYSIS_BASE)
    steps = StepProgress(1 + len(runs), desc="bench criteria", unit="run", enabled=progress)
    with steps.step(f"{bench.name} seed {seed}: ERM reference"):
        reference = train_reference(data, default_config("erm", seed, **ANALYSIS_BASE),
                                    work / "criteria" / f"{bench.name}-seed{seed}" / "reference", progress=False,
                                    keep_epochs=True)
    val = Validation(data["val"].labels.numpy(), np.asarray(reference.val_groups, dtype=str),
                     _correct(reference.checkpoint, data["val"]), _true_groups(data["val"], bench.attrs))
    test_groups = _true_groups(data["test"], bench.attrs)
    rows = []
    for name, overrides in runs.items():
        cfg = default_config(overrides["method"], seed, **{**ANALYSIS_BASE, **overrides})
        with steps.step(f"{name}: train, score every epoch"):
            kept = _kept_epochs(data, cfg, work / "criteria" / f"{bench.name}-seed{seed}" / _folder_name(name),
                                reference)
            for epoch in range(1, cfg.epochs + 1):
                checkpoint = epoch_path(kept, epoch)
                test_groups_acc = _group_accuracies(_correct(checkpoint, data["test"]), test_groups)
                rows.append({"run": name, "epoch": epoch, **criterion_scores(_correct(checkpoint, data["val"]), val),
                             "test_wg": float(test_groups_acc.min()),
                             "test_balanced": float(test_groups_acc.mean())})
    steps.close()
    checkpoints = pd.DataFrame(rows)
    report = {"benchmark": bench.name, "seed": seed, "held_out": bench.held_out, "checkpoints": len(checkpoints),
              "pooled_images": {name: int(mask.sum()) for name, mask in val.pools().items()},
              **analyse(checkpoints), "rows": rows, "wall_seconds": time.perf_counter() - start}
    if json_path is not None:
        write_report(json_path, report)
    return report
