"""Warm starts: a training that starts from an earlier run's main model, for a share of a cold training's steps."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from mavias.core.train.config import TrainConfig
from mavias.core.train.data import feature_split
from mavias.core.train.recipe import resolve_recipe
from mavias.core.train.warm import WarmStart
from mavias.errors import UserError
from tests.support.training import make_trainer

CLASSES = ["a", "b"]


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 2)) + 1.5 * y[:, None]
    return pd.DataFrame({"sample_id": [f"s{seed}-{i}" for i in range(n)], "label": np.array(CLASSES)[y],
                         "x1": x[:, 0], "x2": x[:, 1]})


@pytest.fixture(scope="module")
def splits():
    return feature_split(_frame(256, 0), CLASSES), feature_split(_frame(128, 1), CLASSES)


def _cfg(**extra) -> TrainConfig:
    return TrainConfig.model_validate({"method": "erm", "backbone": {"name": "mlp", "width": 8}, "epochs": 4,
                                       "batch_size": 32, "optim": {"lr": 0.05}, "selection": "val_acc",
                                       "validate_every": 1, "patience": 0, **extra})


def test_a_warm_start_shortens_explicit_epochs_or_the_methods_recipe_length(tmp_path):
    warm = WarmStart(tmp_path / "best.pt", 0.4)
    assert warm.apply(_cfg(epochs=10)).epochs == 4
    assert warm.apply(_cfg(epochs=10)).init_from == str(tmp_path / "best.pt")
    assert warm.apply(TrainConfig.model_validate({"method": "mavias"})).length_share == pytest.approx(0.4)


@pytest.mark.parametrize(("n_train", "cold_epochs"), [(400, 100), (4000, 49)])  # at the recipe's bound, and within
def test_a_warm_share_shortens_the_recipes_epochs_after_its_bounds(n_train, cold_epochs):
    train = feature_split(_frame(n_train, 0), CLASSES)
    settings = {"method": "erm", "backbone": {"name": "mlp", "width": 8}, "optim": {"lr": 0.05}}
    cold = resolve_recipe(TrainConfig.model_validate(settings), train, 2)
    warm = resolve_recipe(TrainConfig.model_validate({**settings, "length_share": 0.4}), train, 2)
    assert cold.config.epochs == cold_epochs
    assert warm.config.epochs == math.ceil(0.4 * cold_epochs) and "a warm start's share" in warm.notes["epochs"]


def test_a_warm_run_starts_from_the_checkpoints_main_model(splits, tmp_path):
    train, val = splits
    cold = make_trainer(_cfg(), train, val, CLASSES, tmp_path / "cold", progress=False).fit()
    checkpoint = cold.checkpoint("val_acc")
    warm = make_trainer(_cfg(init_from=str(checkpoint), optim={"lr": 1e-9}, epochs=1), train, val, CLASSES,
                        tmp_path / "warm", progress=False)
    warm.fit()
    started = torch.load(checkpoint, weights_only=True)["model"]
    for name, tensor in warm.model.state_dict().items():  # an lr of 1e-9 leaves the loaded weights as they were
        assert torch.allclose(tensor, started[name], atol=1e-6), name
    scratch = make_trainer(_cfg(optim={"lr": 1e-9}, epochs=1), train, val, CLASSES, tmp_path / "scratch",
                           progress=False)
    scratch.fit()
    assert not torch.allclose(scratch.model.state_dict()["head.weight"], started["head.weight"])


def test_a_checkpoint_of_other_classes_or_another_backbone_is_one_readable_error(splits, tmp_path):
    train, val = splits
    checkpoint = make_trainer(_cfg(epochs=1), train, val, CLASSES, tmp_path / "a", progress=False).fit() \
        .checkpoint("val_acc")
    other_classes = feature_split(_frame(64, 2).replace({"a": "c"}), ["b", "c"])
    with pytest.raises(UserError, match="was trained on the classes"):
        make_trainer(_cfg(init_from=str(checkpoint)), other_classes, other_classes, ["b", "c"], tmp_path / "b",
                     progress=False).fit()
    with pytest.raises(UserError, match="holds another architecture"):
        make_trainer(_cfg(init_from=str(checkpoint), backbone={"name": "mlp", "width": 16}), train, val, CLASSES,
                     tmp_path / "c", progress=False).fit()
    with pytest.raises(UserError, match="cannot read the warm-start checkpoint"):
        make_trainer(_cfg(init_from=str(tmp_path / "missing.pt")), train, val, CLASSES, tmp_path / "d",
                     progress=False).fit()
    (tmp_path / "random.pt").write_bytes(b"\x8c not a pickle")
    with pytest.raises(UserError, match=r"random.pt \(UnpicklingError: not a checkpoint file\)"):
        make_trainer(_cfg(init_from=str(tmp_path / "random.pt")), train, val, CLASSES, tmp_path / "e",
                     progress=False).fit()
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(UserError, match="list.pt is not a checkpoint written by `mavias train`"):
        make_trainer(_cfg(init_from=str(tmp_path / "list.pt")), train, val, CLASSES, tmp_path / "f",
                     progress=False).fit()


def test_init_from_is_refused_for_methods_with_networks_it_would_leave_cold(tmp_path):
    with pytest.raises(ValueError, match="init_from warm-starts the methods that train one network"):
        _cfg(method="lff", init_from=str(tmp_path / "best.pt"))
