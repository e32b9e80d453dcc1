import numpy as np
import pandas as pd
import pytest
import torch

from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import TrainConfig
from mavias.core.train.data import attach_groups, feature_split
from mavias.core.train.optim import batches_per_epoch
from mavias.core.train.sanity import TrainingDiverged
from tests.support.training import erm_checkpoint, make_trainer

CLASSES = ["a", "b"]


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 3))
    x[:, 0] += 2.0 * y
    x[:, 2] += np.where(rng.random(n) < 0.9, 2.0 * y, 2.0 * (1 - y))  # x3: a 90% shortcut
    return pd.DataFrame({"sample_id": [f"s{seed}-{i}" for i in range(n)], "label": np.array(CLASSES)[y],
                         "x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2]})


@pytest.fixture(scope="module")
def splits():
    train, val = feature_split(_frame(256, 0), CLASSES), feature_split(_frame(128, 1), CLASSES)
    for split in (train, val):
        split.embeddings = torch.tensor(split.frame[["x3"]].to_numpy(), dtype=torch.float32)
        attach_groups(split, split.frame["label"] + "|" + (split.frame["x3"] > 1).astype(str), ["a|False", "a|True", "b|False", "b|True"])
    return train, val


def _cfg(method: str, **extra) -> TrainConfig:
    return TrainConfig.model_validate({"method": method, "backbone": {"name": "mlp", "width": 8}, "epochs": 4,
                                       "batch_size": 32, "optim": {"lr": 0.05}, "selection": "val_acc",
                                       "validate_every": 1, "patience": 0, **extra})


def _weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["modules"]


@pytest.mark.parametrize("method", ["erm", "mavias", "groupdro", "jtt", "lff", "sd", "flac", "debian"])
def test_resume_after_interruption_equals_uninterrupted_training(splits, tmp_path, method):
    train, val = splits
    cfg = _cfg(method, jtt={"id_epochs": 1, "upweight": 5})
    reference = erm_checkpoint(train, val, CLASSES, tmp_path / "erm", cfg) if method == "flac" else None
    make_trainer(cfg, train, val, CLASSES, tmp_path / "full", progress=False, reference=reference).fit()
    first = make_trainer(cfg, train, val, CLASSES, tmp_path / "cut", progress=False, reference=reference).fit(
        stop_after=2)
    assert not first.completed and len(first.history) == 2
    # a new process would build a fresh Trainer: the checkpoint alone must carry everything (incl. projection)
    resumed = make_trainer(cfg, train, val, CLASSES, tmp_path / "cut", progress=False, reference=reference).fit()
    assert resumed.completed and list(resumed.history["epoch"]) == [1, 2, 3, 4]
    full, cut = _weights(tmp_path / "full" / "last.pt"), _weights(tmp_path / "cut" / "last.pt")
    assert full.keys() == cut.keys()
    for module in full:
        for name, tensor in full[module].items():
            assert torch.equal(tensor, cut[module][name]), f"{module}.{name} differs after resume"


def test_mavias_checkpoint_holds_projection_and_optimizer_state(splits, tmp_path):
    train, val = splits
    make_trainer(_cfg("mavias"), train, val, CLASSES, tmp_path, progress=False).fit(stop_after=1)
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    assert set(state["modules"]) == {"model", "projection"}
    assert state["modules"]["projection"]["weight"].shape == (8, 1)  # embedding dim 1 -> feature dim 8
    assert len(state["optimizer"]["param_groups"]) == 2


def test_training_is_deterministic_on_cpu(splits, tmp_path):
    train, val = splits
    a = make_trainer(_cfg("mavias"), train, val, CLASSES, tmp_path / "a", progress=False).fit()
    b = make_trainer(_cfg("mavias"), train, val, CLASSES, tmp_path / "b", progress=False).fit()
    pd.testing.assert_frame_equal(a.history.drop(columns="seconds"), b.history.drop(columns="seconds"))


def test_resume_refuses_a_different_config(splits, tmp_path):
    train, val = splits
    make_trainer(_cfg("erm"), train, val, CLASSES, tmp_path, progress=False).fit(stop_after=1)
    with pytest.raises(ValueError, match="another config"):
        make_trainer(_cfg("erm", seed=1), train, val, CLASSES, tmp_path, progress=False).fit()


def test_selection_by_tag_groups_writes_both_best_checkpoints(splits, tmp_path):
    train, val = splits
    groups = val.frame["label"] + "|" + (val.frame["x3"] > 1).map({True: "biased", False: "unbiased"})
    result = make_trainer(_cfg("erm"), train, val, CLASSES, tmp_path, val_groups=groups, progress=False).fit()
    assert set(result.best) == {"val_acc", "val_tag_wg", "val_robust", "val_true_wg"}  # val has true groups too
    assert result.history["val_tag_wg"].max() == pytest.approx(result.best["val_tag_wg"]["score"])
    model, classes, cfg = load_main_model(result.checkpoint("val_tag_wg"))
    assert classes == CLASSES and cfg.method == "erm"
    assert not hasattr(model, "projection")
    assert (tmp_path / "metrics.csv").exists() and any((tmp_path / "tensorboard").iterdir())


def test_worst_group_ties_are_broken_by_validation_accuracy(splits, tmp_path):
    """A group the model can never get right pins the worst-group score at 0 in every epoch; the selected
    epoch must then be the most accurate one, not simply the first."""
    train, val = splits
    trap = val.frame["x1"].idxmin()  # the most "a"-like sample, labelled b: always misclassified
    val.labels[trap] = 1
    groups = pd.Series(["all"] * len(val), index=val.frame.index)
    groups[trap] = "trap"
    try:
        result = make_trainer(_cfg("erm"), train, val, CLASSES, tmp_path, val_groups=groups, progress=False).fit()
    finally:
        val.labels[trap] = int(val.frame.loc[trap, "label"] == "b")
    assert (result.history["val_tag_wg"] == 0).all()
    assert result.best["val_tag_wg"]["epoch"] == result.best["val_acc"]["epoch"]
    assert result.best["val_tag_wg"]["fallback"] == "val_acc"  # constant over epochs: reported, val_acc used
    assert "fallback" not in result.best["val_robust"] and result.history["val_robust"].nunique() > 1
    assert result.best["val_acc"]["epoch"] == int(result.history["val_acc"].idxmax()) + 1 > 1


def test_a_best_checkpoint_a_kill_left_behind_last_pt_is_mended_on_resume(splits, tmp_path):
    train, val = splits
    make_trainer(_cfg("erm"), train, val, CLASSES, tmp_path, progress=False).fit(stop_after=1)
    best = tmp_path / "best_val_acc.pt"
    stale = torch.load(best, weights_only=True)
    torch.save(stale | {"epoch": 0}, best)  # killed after last.pt named epoch 1 the best, before its file was written
    make_trainer(_cfg("erm"), train, val, CLASSES, tmp_path, progress=False).load_checkpoint(tmp_path / "last.pt")
    held = torch.load(best, weights_only=True)
    assert held["epoch"] == 1 and held["model"].keys() == stale["model"].keys()
    assert all(torch.equal(held["model"][k], v) for k, v in stale["model"].items())  # last.pt's model of epoch 1


def test_weights_that_turned_nan_on_an_epochs_last_step_are_neither_scored_nor_saved(splits, tmp_path):
    train, val = splits
    cfg = _cfg("erm")
    trainer = make_trainer(cfg, train, val, CLASSES, tmp_path, progress=False)
    steps = [0]

    def explode_on_the_epochs_last_step(optimizer, args, kwargs):  # noqa: ANN001 - torch's hook signature
        steps[0] += 1
        if steps[0] == batches_per_epoch(len(train), cfg.batch_size):  # its loss was finite, its update is not
            next(trainer.model.parameters()).data.fill_(float("nan"))

    trainer.optimizer.register_step_post_hook(explode_on_the_epochs_last_step)
    with pytest.raises(TrainingDiverged, match="at the end of epoch 1 \\(weights NaN or infinite\\)"):
        trainer.fit()
    assert not (tmp_path / "last.pt").exists() and not list(tmp_path.glob("best_*.pt"))
