"""A training split of k x batch_size + 1 samples never gives a 1-sample batch, for every method, even where the
backbone's BatchNorm sees 1x1 features (resnet18 at 28 px); a training error that escapes is one readable line."""

from __future__ import annotations

import typing

import numpy as np
import pandas as pd
import pytest
import torch
import typer
from typer.testing import CliRunner

from mavias.cli.errors import user_errors_exit
from mavias.core.train import trainer as trainer_module
from mavias.core.train.config import TrainConfig
from mavias.core.train.data import SplitData, attach_groups, class_index
from mavias.core.train.failures import TrainingFailed
from mavias.errors import ExplainedFailure
from tests.support.training import erm_checkpoint, make_trainer

CLASSES = ["a", "b"]
BATCH = 4
METHODS = typing.get_args(TrainConfig.model_fields["method"].annotation)


def _split(n: int, seed: int) -> SplitData:
    rng = np.random.default_rng(seed)
    labels = np.array(CLASSES)[np.arange(n) % 2]
    frame = pd.DataFrame({"sample_id": [f"s{seed}-{i}" for i in range(n)], "label": labels})
    images = torch.from_numpy(rng.random((n, 3, 28, 28), dtype=np.float32))  # a tensor is a dataset of its rows
    split = SplitData(images, frame,
                      class_index(CLASSES, frame["label"]), embeddings=torch.randn(n, 8))
    attach_groups(split, frame["label"] + "|g", ["a|g", "b|g"])
    return split


def _config(method: str) -> TrainConfig:
    return TrainConfig.model_validate({
        "method": method, "backbone": {"name": "resnet18"}, "image_size": 28, "batch_size": BATCH, "epochs": 1,
        "optim": {"name": "sgd", "lr": 0.01, "weight_decay": 0.0, "schedule": "none"},
        "preprocessing": {"augment": False, "flip": False}, "selection": "val_acc", "device": "cpu",
        "jtt": {"id_epochs": 1},
    })


@pytest.mark.parametrize("method", METHODS)
def test_k_batches_plus_one_sample_trains_every_method_on_resnet18_at_28_px(method, tmp_path):
    train, val = _split(2 * BATCH + 1, 0), _split(6, 1)
    reference = erm_checkpoint(train, val, CLASSES, tmp_path / "erm", _config("erm")) if method == "flac" else None
    result = make_trainer(_config(method), train, val, CLASSES, tmp_path / "run", progress=False,
                          reference=reference).fit()
    assert result.completed and len(result.history) == 1


def test_without_dropping_it_the_one_sample_batch_crashes_in_one_readable_line(tmp_path, monkeypatch):
    """The fault the last-batch rule prevents is real: keep the 1-sample batch and BatchNorm refuses it; the error
    that escapes is one line naming the run, the epoch and the cause, with the original chained for --debug."""
    monkeypatch.setattr(trainer_module, "drop_last", lambda n, batch_size: False)
    train, val = _split(2 * BATCH + 1, 0), _split(6, 1)
    with pytest.raises(TrainingFailed) as failed:
        make_trainer(_config("erm"), train, val, CLASSES, tmp_path, progress=False).fit()
    message = str(failed.value)
    assert "training erm in" in message and "failed in epoch 1" in message
    assert "Expected more than 1 value per channel" in message and "\n" not in message
    assert isinstance(failed.value.__cause__, ValueError)

    app = typer.Typer()  # how the command line shows it: one red line, exit status 1, no traceback

    @app.command()
    def crash() -> None:
        with user_errors_exit(debug=False):
            raise failed.value

    shown = CliRunner().invoke(app, [])
    assert shown.exit_code == 1 and "Traceback" not in shown.output
    assert shown.output.count("\n") == 1 and "Expected more than 1 value per channel" in shown.output
    assert issubclass(TrainingFailed, ExplainedFailure)
