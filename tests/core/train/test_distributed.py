"""Data-parallel training (DistributedDataParallel over torch.distributed.run, gloo on CPU): two processes train as
one process does, rank 0 alone writes the run folder, and a cut run resumes.

Tolerance: the model (an MLP, no BatchNorm) sees the same global batches in both runs and DDP averages the two
halves' gradients, so only the order of float additions differs: per-epoch validation accuracy within 1 point,
training loss within 1e-4 relative, final weights within 1e-4.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from mavias.core.train.config import TrainConfig
from mavias.core.train.data import attach_groups, feature_split
from mavias.core.train.distributed import RankShare, check_supported, fit_distributed
from mavias.core.train.prepare import PreparedData
from mavias.errors import UserError
from tests.core.train.test_trainer import CLASSES, _frame
from tests.support.training import make_trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data() -> PreparedData:
    train, val = feature_split(_frame(250, 0), CLASSES), feature_split(_frame(128, 1), CLASSES)
    for split in (train, val):
        split.embeddings = torch.tensor(split.frame[["x3"]].to_numpy(), dtype=torch.float32)
        attach_groups(split, split.frame["label"] + "|" + (split.frame["x3"] > 1).astype(str),
                      ["a|False", "a|True", "b|False", "b|True"])
    return PreparedData(CLASSES, {"train": train, "val": val}, pd.DataFrame())


def _cfg(**extra) -> TrainConfig:
    return TrainConfig.model_validate({"method": "mavias", "backbone": {"name": "mlp", "width": 16}, "epochs": 4,
                                       "batch_size": 32, "optim": {"name": "sgd", "lr": 0.05, "schedule": "cosine",
                                                                   "weight_decay": 5e-4},
                                       "selection": "val_acc", "device": "cpu", "validate_every": 1, "patience": 0,
                                       "amp": False,  # float32: the ranks' losses are compared to 1e-4
                                       **extra})


def _modules(path) -> dict[str, dict[str, torch.Tensor]]:
    return torch.load(path, weights_only=True)["modules"]


# the default, and the paper presets' alignment over the whole batch's logits (coupling the ranks' shares: its norms
# are the global batch's, else each rank would align its half and alpha act as alpha / 2), strong enough to show
@pytest.mark.parametrize("mavias", [{}, {"align": "batch", "alpha": 0.1, "bias_path": "joint"}],
                         ids=["default", "batch-alignment"])
def test_two_processes_train_as_one_and_only_rank_0_writes(data: PreparedData, tmp_path, mavias: dict) -> None:
    cfg = _cfg(mavias=mavias)
    one = make_trainer(cfg, data["train"], data["val"], CLASSES, tmp_path / "one", progress=False).fit()
    two = fit_distributed(data, cfg, tmp_path / "two", 2)
    assert two.completed and list(two.history["epoch"]) == [1, 2, 3, 4]
    assert np.allclose(two.history["val_acc"], one.history["val_acc"], atol=0.01)
    assert np.allclose(two.history["train_loss"], one.history["train_loss"], rtol=1e-4)
    assert two.best["val_acc"]["epoch"] == one.best["val_acc"]["epoch"]
    single, data_parallel = _modules(tmp_path / "one" / "last.pt"), _modules(tmp_path / "two" / "last.pt")
    for module, weights in single.items():
        for name, tensor in weights.items():
            assert torch.allclose(tensor, data_parallel[module][name], atol=1e-4), f"{module}.{name}"
    files = sorted(p.relative_to(tmp_path / "one").parent.as_posix() + "/" + p.name.split(".")[0]
                   for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "two").parent.as_posix() + "/" + p.name.split(".")[0]
                           for p in (tmp_path / "two").rglob("*") if p.is_file())
    assert len(list((tmp_path / "two" / "tensorboard").iterdir())) == 1  # one writer: one event file


def test_a_cut_data_parallel_run_resumes_to_the_uninterrupted_one(data: PreparedData, tmp_path) -> None:
    cfg = _cfg(method="erm", epochs=3)
    fit_distributed(data, cfg, tmp_path / "full", 2)
    cut = fit_distributed(data, cfg, tmp_path / "cut", 2, stop_after=1)
    assert not cut.completed and list(cut.history["epoch"]) == [1]
    resumed = fit_distributed(data, cfg, tmp_path / "cut", 2)
    assert resumed.completed and list(resumed.history["epoch"]) == [1, 2, 3]
    full, again = _modules(tmp_path / "full" / "last.pt"), _modules(tmp_path / "cut" / "last.pt")
    for name, tensor in full["model"].items():
        assert torch.allclose(tensor, again["model"][name], atol=1e-6), name


def test_rank_shares_cover_each_global_batch_once() -> None:
    batches = torch.utils.data.BatchSampler(range(10), batch_size=4, drop_last=False)
    shares = [list(RankShare(batches, rank, 3)) for rank in range(3)]
    assert [sorted(sum((s[i] for s in shares), [])) for i in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert all(len(s) == 2 for s in shares)  # the last batch (2 samples) is smaller than 3 ranks: skipped by all


@pytest.mark.parametrize("method", ["groupdro", "lff", "flac", "debian"])
def test_methods_whose_loss_needs_the_whole_batch_are_refused(method: str) -> None:
    with pytest.raises(UserError, match="--nproc 1"):
        check_supported(_cfg(method=method), 2)


def test_mavias_train_nproc_2_on_images_through_the_command_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from mavias.cli import app

    def invoke(*args: str) -> str:
        result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    data = tmp_path / "scenes"
    invoke("data", "make", "synthetic-scenes", "--out", data, "--n-train", "120", "--n-val", "40",
           "--n-test-per-cell", "1", "--image-size", "32", "--tags", "oracle", "--relevance", "oracle")  # no tagger
    out = tmp_path / "erm"
    invoke("train", "--manifest", data / "manifest.parquet", "--relevance", data / "relevance.parquet",
           "--workspace", tmp_path / "ws", "--set", "method=erm", "--set", "selection=val_acc", "--set", "epochs=2",
           "--set", "image_size=32", "--set", "backbone.width=8", "--set", "batch_size=32", "--set", "device=cpu",
           "--nproc", "2", "--out", out)
    assert {"last.pt", "best_val_acc.pt", "config.yaml", "recipe.json", "metrics.csv", "train_summary.json",
            "biased_tags.csv"} <= {p.name for p in out.iterdir()}
    assert list(pd.read_csv(out / "metrics.csv")["epoch"]) == [1, 2]
    assert len(list((out / "tensorboard").iterdir())) == 1
