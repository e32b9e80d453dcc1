"""The supplement's 3-D two moons in `mavias bench core`: x1, x2 define the label, x3 separates the classes in
training and g sees x3 only; ERM, MAVias and the GroupDRO oracle at fixed settings (an MLP, 30 epochs), selected by
validation accuracy, tested with x3 independent of the label."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from mavias.core.evaluate.dataset_metrics import evaluation_report
from mavias.core.evaluate.metrics import group_key
from mavias.core.protocol import resolve_run
from mavias.core.synthetic.two_moons import TwoMoons3DConfig, make_two_moons_3d
from mavias.core.train.checkpoints import best_checkpoint, load_main_model
from mavias.core.train.config import TrainConfig
from mavias.core.train.data import attach_groups, feature_split
from mavias.core.train.inference import predict_logits
from mavias.core.train.prepare import PreparedData
from mavias.core.train.trainer import Trainer
from mavias.tools.bench.suite import mean_and_sd

MOONS = "two-moons-3d"
MOONS_BASE: dict = {
    "backbone": {"name": "mlp", "width": 64},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "schedule": "none"},
    "epochs": 30,
    "batch_size": 64,
    "selection": "val_acc",
}
MOONS_METHODS = {"ERM": {"method": "erm"}, "MAVias": {"method": "mavias", "mavias": {"alpha": 0.01, "lam": 0.5}},
                 "GroupDRO (oracle)": {"method": "groupdro"}}


def prepare_moons(work: Path, data_cfg: TwoMoons3DConfig) -> PreparedData:
    frame = pd.read_parquet(make_two_moons_3d(work / "data" / MOONS, data_cfg))
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
    return PreparedData(classes, splits, pd.DataFrame())


def moons_metrics(data: PreparedData, checkpoint: Path) -> dict:
    model, _, _ = load_main_model(checkpoint)
    test = data["test"]
    pred = test.frame.assign(label=test.labels.numpy(), pred=predict_logits(model, test).argmax(1).numpy())
    metrics, _ = evaluation_report(pred, group_key(test.frame, ["label", "attr_x3_aligned"]))
    return {"test_accuracy_x3_shuffled": metrics["accuracy"], "wg_acc": metrics["worst_group_accuracy"],
            "avg_acc": metrics["average_accuracy"]}


def run_dir(work: Path, method: str, seed: int) -> Path:
    return work / MOONS / f"seed{seed}" / method.split()[0].lower()


def run_moons(work: Path, seeds: int, data_cfg: TwoMoons3DConfig | None = None) -> dict:
    """Every method on every seed; the summary and the supplement's figure (seed 0)."""
    data = prepare_moons(work, data_cfg or TwoMoons3DConfig())
    rows = []
    for seed in range(seeds):
        for method, overrides in MOONS_METHODS.items():
            cfg = TrainConfig.model_validate({**MOONS_BASE, **overrides, "seed": seed})
            out = run_dir(work, method, seed)
            run = Trainer(resolve_run(data, cfg, out), data["train"], data["val"], data.classes, out,
                          progress=False).fit()
            rows.append({"method": method, "seed": seed, **moons_metrics(data, run.checkpoint("val_acc"))})
    summary = mean_and_sd(pd.DataFrame(rows), ["method"])
    return {"summary": summary, "runs": rows, "figure": str(plot_moons(data, work, 0, work / "two_moons_3d.png"))}


def plot_moons(data: PreparedData, work: Path, seed: int, out_png: Path) -> Path:
    """The supplement's figure: vanilla vs MAVias outputs on the (x1, x2) and (x1, x3) planes (test split)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = data["test"]
    fig, axes = plt.subplots(2, 2, figsize=(9, 8), constrained_layout=True)
    for row, (title, method) in enumerate((("Vanilla (ERM)", "ERM"), ("MAVias", "MAVias"))):
        model, _, _ = load_main_model(best_checkpoint(run_dir(work, method, seed), "val_acc"))
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
