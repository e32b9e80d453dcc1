"""`mavias bench core`: ERM, JTT, MAVias and the GroupDRO oracle on the built-in benchmarks, over seeds.

Hyperparameters come from small grids selected on VALIDATION only, by both criteria: validation accuracy (the
paper's) and validation worst-group accuracy over the tag-derived groups of the ERM reference (no bias labels).
The test split is used once per selected model, for reporting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from mavias.benchmarks.synthetic_scenes import SyntheticScenesConfig, make_synthetic_scenes
from mavias.benchmarks.two_moons import TwoMoons3DConfig, make_two_moons_3d
from mavias.encode import SentenceTransformerEncoder
from mavias.evaluate.metrics import group_key
from mavias.evaluate.protocols import evaluation_report
from mavias.relevance import load_relevance
from mavias.train.config import TrainConfig
from mavias.train.data import attach_groups, feature_split
from mavias.train.inference import predict_logits
from mavias.train.prepare import PreparedData, prepare_image_data
from mavias.train.trainer import Trainer, load_main_model
from mavias.utils.atomic import write_json
from mavias.workflow import BG_ALIGNED, CO_ALIGNED, evaluate_checkpoint, train_method, train_reference

CRITERIA = ("val_tag_wg", "val_acc")
SCENES_ATTRS = [BG_ALIGNED, CO_ALIGNED]

# Images are drawn at 64 px and trained at 48 px: the shapes stay recognisable and an epoch costs half as much.
SCENES_BASE: dict = {
    "backbone": {"name": "small_cnn", "width": 32},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
    "epochs": 12,
    "batch_size": 64,
    "image_size": 48,
}
SCENES_GRIDS: dict[str, list[dict]] = {
    "ERM": [{"method": "erm"}],
    "JTT": [{"method": "jtt", "jtt": {"id_epochs": 1, "upweight": 10}},
            {"method": "jtt", "jtt": {"id_epochs": 2, "upweight": 30}}],
    "MAVias": [{"method": "mavias", "mavias": {"alpha": 0.01, "lam": 0.5}},
               {"method": "mavias", "mavias": {"alpha": 0.01, "lam": 0.4}},
               {"method": "mavias", "mavias": {"alpha": 0.01, "lam": 0.5, "projection_lr_mult": 10}}],
    "GroupDRO (oracle)": [{"method": "groupdro", "groupdro": {"eta": 0.01}}],
}

MOONS_BASE: dict = {
    "backbone": {"name": "mlp", "width": 64},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
    "epochs": 30,
    "batch_size": 64,
    "selection": "val_acc",
}
MOONS_GRIDS: dict[str, list[dict]] = {
    "ERM": [{"method": "erm"}],
    "MAVias": [{"method": "mavias", "mavias": {"alpha": 0.01, "lam": 0.5}}],
    "GroupDRO (oracle)": [{"method": "groupdro"}],
}


@dataclass
class MethodOutcome:
    """One method, one seed, one selection criterion: the chosen grid point and its test metrics."""

    method: str
    seed: int
    criterion: str
    chosen: dict
    val_score: float
    metrics: dict = field(default_factory=dict)
    selected_epoch: int = 0
    grid: list[dict] = field(default_factory=list)  # every grid point's val score and test metrics (diagnostics)


def _config(base: dict, overrides: dict, seed: int, selection: str) -> TrainConfig:
    merged = {**base, **overrides, "seed": seed, "selection": selection}
    return TrainConfig.model_validate(merged)


# --- synthetic-scenes ---------------------------------------------------------------------------------------
def prepare_scenes(work: Path, data_cfg: SyntheticScenesConfig) -> PreparedData:
    data_dir = work / "data" / "synthetic-scenes"
    manifest = data_dir / "manifest.parquet"
    if not manifest.exists():
        make_synthetic_scenes(data_dir, data_cfg)
    return prepare_image_data(
        manifest,
        relevance=load_relevance(data_dir / "relevance.parquet"),
        encoder=SentenceTransformerEncoder(),
        store_dir=work / "embeddings",
        image_size=SCENES_BASE["image_size"],
        group_attrs=SCENES_ATTRS,
    )


def _scenes_metrics(data: PreparedData, checkpoint: Path, reference, seconds_per_epoch: float) -> dict:
    result = evaluate_checkpoint(data, checkpoint, reference, closed_set_attrs=SCENES_ATTRS)
    closed, opened, gaps = result["closed_set"], result["open_set"], result["urbancars"]
    return {
        "test_accuracy": result["accuracy"],
        "wg_acc": closed["worst_group_accuracy"],
        "wg_ci": [closed["worst_group_ci_low"], closed["worst_group_ci_high"]],
        "avg_acc": closed["average_accuracy"],
        "avg_acc_weighted": closed["weighted_average_accuracy"],
        "openset_wg_acc": opened["worst_group_accuracy"],
        "openset_avg_acc": opened["average_accuracy"],
        "id_acc": gaps["id_accuracy"],
        "bg_gap": gaps["bg_gap"],
        "coobj_gap": gaps["coobj_gap"],
        "both_gap": gaps["both_gap"],
        "seconds_per_epoch": seconds_per_epoch,
    }


def run_scenes_seed(data: PreparedData, work: Path, seed: int, grids: dict[str, list[dict]] = SCENES_GRIDS,
                    base: dict = SCENES_BASE) -> tuple[list[MethodOutcome], pd.DataFrame]:
    seed_dir = work / f"seed{seed}"
    reference = train_reference(data, _config(base, {"method": "erm"}, seed, "val_acc"), seed_dir / "reference",
                                progress=False)
    outcomes = []
    for method, grid in grids.items():
        runs = []
        for i, overrides in enumerate(grid):
            cfg = _config(base, overrides, seed, "val_tag_wg")
            runs.append((overrides, train_method(data, cfg, seed_dir / f"{method.split()[0].lower()}-{i}", reference,
                                                 progress=False)))
        for criterion in CRITERIA:
            # test metrics of every grid point are kept for diagnosis only; the choice uses the validation score
            grid_metrics = [{"config": o, "val_score": r.best[criterion]["score"], "epoch": r.best[criterion]["epoch"],
                             **_scenes_metrics(data, r.checkpoint(criterion), reference, r.seconds_per_epoch)}
                            for o, r in runs]
            chosen = max(range(len(runs)), key=lambda i: grid_metrics[i]["val_score"])
            metrics = {k: v for k, v in grid_metrics[chosen].items() if k not in ("config", "val_score", "epoch")}
            outcomes.append(MethodOutcome(method, seed, criterion, runs[chosen][0], grid_metrics[chosen]["val_score"],
                                          metrics, grid_metrics[chosen]["epoch"], grid_metrics))
    return outcomes, reference.biased_tags


# --- two-moons-3d -------------------------------------------------------------------------------------------
def prepare_moons(work: Path, data_cfg: TwoMoons3DConfig) -> tuple[PreparedData, pd.DataFrame]:
    path = make_two_moons_3d(work / "data" / "two-moons-3d", data_cfg)
    frame = pd.read_parquet(path)
    classes = sorted(frame["label"].unique())
    splits = {}
    for name, part in frame.groupby("split"):
        split = feature_split(part, classes)
        split.embeddings = torch.tensor(part[["x3"]].to_numpy(), dtype=torch.float32)  # g sees x3 only (supplement)
        splits[name] = split
    names = {s: group_key(sp.frame, ["label", "attr_x3_aligned"]) for s, sp in splits.items()}
    vocabulary = sorted(set().union(*(set(n) for n in names.values())))
    for s, split in splits.items():
        attach_groups(split, names[s], vocabulary)
    return PreparedData(classes, splits, pd.DataFrame()), frame


def _moons_metrics(data: PreparedData, checkpoint: Path, seconds_per_epoch: float) -> dict:
    model, _, _ = load_main_model(checkpoint)
    test = data["test"]
    pred = test.frame.assign(label=test.labels.numpy(), pred=predict_logits(model, test).argmax(1).numpy())
    metrics, _ = evaluation_report(pred, group_key(test.frame, ["label", "attr_x3_aligned"]))
    return {"test_accuracy_x3_shuffled": metrics["accuracy"], "wg_acc": metrics["worst_group_accuracy"],
            "avg_acc": metrics["average_accuracy"], "seconds_per_epoch": seconds_per_epoch}


def run_moons_seed(data: PreparedData, work: Path, seed: int) -> list[MethodOutcome]:
    outcomes = []
    for method, grid in MOONS_GRIDS.items():
        runs = [(o, Trainer(_config(MOONS_BASE, o, seed, "val_acc"), data["train"], data["val"], data.classes,
                            work / f"moons-seed{seed}" / f"{method.split()[0].lower()}-{i}", progress=False).fit())
                for i, o in enumerate(grid)]
        overrides, run = max(runs, key=lambda r: r[1].best["val_acc"]["score"])
        outcomes.append(MethodOutcome(method, seed, "val_acc", overrides, run.best["val_acc"]["score"],
                                      _moons_metrics(data, run.checkpoint("val_acc"), run.seconds_per_epoch)))
    return outcomes


def plot_moons(data: PreparedData, work: Path, seed: int, out_png: Path) -> Path:
    """The supplement's figure: vanilla vs MAVias outputs on the (x1, x2) and (x1, x3) planes (test split)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = data["test"]
    fig, axes = plt.subplots(2, 2, figsize=(9, 8), constrained_layout=True)
    for row, (title, method) in enumerate((("Vanilla (ERM)", "erm"), ("MAVias", "mavias"))):
        model, _, _ = load_main_model(work / f"moons-seed{seed}" / f"{method}-0" / "best_val_acc.pt")
        prob = torch.softmax(predict_logits(model, test), 1)[:, 1].numpy()
        for col, other in enumerate(("x2", "x3")):
            ax = axes[row, col]
            points = ax.scatter(test.frame["x1"], test.frame[other], c=prob, cmap="coolwarm", vmin=0, vmax=1, s=6)
            ax.set(title=f"{title}: outputs on x1, {other}", xlabel="x1", ylabel=other)
    fig.colorbar(points, ax=axes, label="P(moon_1)")
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


# --- aggregation --------------------------------------------------------------------------------------------
def summarise(outcomes: list[MethodOutcome]) -> list[dict]:
    """Mean and std over seeds per (method, criterion) for every numeric metric."""
    rows = []
    frame = pd.DataFrame([{"method": o.method, "criterion": o.criterion, "seed": o.seed, **o.metrics} for o in outcomes])
    for (method, criterion), part in frame.groupby(["method", "criterion"], sort=False):
        row: dict = {"method": method, "criterion": criterion, "seeds": len(part)}
        for column in part.columns:
            if column not in row and column != "seed" and pd.api.types.is_numeric_dtype(part[column]):
                row[column] = {"mean": float(part[column].mean()), "std": float(part[column].std(ddof=0))}
        rows.append(row)
    return rows


def floors(summary: list[dict], criterion: str = "val_tag_wg") -> dict:
    """The issue's floors on synthetic-scenes, under the default selection criterion (the oracle at its best)."""
    wg = {(r["method"], r["criterion"]): r["wg_acc"]["mean"] for r in summary}
    speed = {r["method"]: r["seconds_per_epoch"]["mean"] for r in summary if r["criterion"] == criterion}
    oracle = max(wg[("GroupDRO (oracle)", c)] for c in CRITERIA)
    result = {
        "criterion": criterion,
        "mavias_minus_erm_wg": wg[("MAVias", criterion)] - wg[("ERM", criterion)],
        "mavias_minus_jtt_wg": wg[("MAVias", criterion)] - wg[("JTT", criterion)],
        "oracle_minus_mavias_wg": oracle - wg[("MAVias", criterion)],
        "mavias_over_erm_seconds_per_epoch": speed["MAVias"] / speed["ERM"],
    }
    result["met"] = {
        "mavias >= erm + 15 points": result["mavias_minus_erm_wg"] >= 0.15,
        "mavias >= jtt": result["mavias_minus_jtt_wg"] >= 0,
        "oracle gap <= 10 points": result["oracle_minus_mavias_wg"] <= 0.10,
        "mavias s/epoch <= 1.10 x erm": result["mavias_over_erm_seconds_per_epoch"] <= 1.10,
    }
    return result


def run_core_bench(work: Path, *, seeds: int = 3, scenes_cfg: SyntheticScenesConfig | None = None,
                   moons_cfg: TwoMoons3DConfig | None = None, json_path: Path | None = None) -> dict:
    start = time.perf_counter()
    scenes = prepare_scenes(work, scenes_cfg or SyntheticScenesConfig())
    scene_outcomes, biased = [], {}
    for seed in range(seeds):
        outcomes, tags = run_scenes_seed(scenes, work, seed)
        scene_outcomes += outcomes
        biased[seed] = tags[tags["in_top_k"]][["class", "tag", "support", "lift"]].to_dict("records")
    moons, _ = prepare_moons(work, moons_cfg or TwoMoons3DConfig())
    moon_outcomes = [o for seed in range(seeds) for o in run_moons_seed(moons, work, seed)]
    figure = plot_moons(moons, work, 0, work / "two_moons_3d.png")
    report = {
        "seeds": seeds,
        "floors": floors(summarise(scene_outcomes)),
        "wall_seconds": time.perf_counter() - start,
        "synthetic_scenes": {"summary": summarise(scene_outcomes), "runs": [o.__dict__ for o in scene_outcomes],
                             "biased_tags_top10": biased},
        "two_moons_3d": {"summary": summarise(moon_outcomes), "runs": [o.__dict__ for o in moon_outcomes],
                         "figure": str(figure)},
        "machine": _machine(),
    }
    if json_path is not None:
        write_json(json_path, report)
    return report


def _machine() -> dict:
    import os
    import platform

    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "threads": torch.get_num_threads(), "numpy": np.__version__}
