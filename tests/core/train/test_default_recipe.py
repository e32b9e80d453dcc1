"""The default recipe: what a user who sets nothing gets, and why, resolved against the data."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from PIL import Image

from mavias.core.train.config import BackboneConfig, TrainConfig
from mavias.core.train.data import feature_split
from mavias.core.train.lr_range import from_curve, steepest, suggest
from mavias.core.train.optim import batches_per_epoch, drop_last, schedule_factor
from mavias.core.train.recipe import (
    PATIENCE_SHARE,
    RECIPES,
    TARGET_STEPS,
    VALIDATION_STEPS,
    choose_image_settings,
    choose_training_settings,
    median_shorter_side,
    recipe_for,
    resolve_recipe,
)
from mavias.core.train.sanity import chance_warnings, trivial_rates
from mavias.core.train.trainer import Trainer
from mavias.errors import UserError

CLASSES = ["a", "b"]


def _splits(n: int = 200, seed: int = 0, *, gap: float = 2.0, noise: float = 1.0):
    """Two classes ``gap`` apart on x1 (noise ``noise``), x2 pure noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    frame = pd.DataFrame({"sample_id": [f"s{seed}-{i}" for i in range(n)], "label": np.array(CLASSES)[y],
                          "x1": rng.normal(size=n) * noise + gap * y, "x2": rng.normal(size=n)})
    return feature_split(frame, CLASSES)


def _mlp(**extra) -> TrainConfig:
    return TrainConfig.model_validate({"method": "erm", "backbone": {"name": "mlp", "width": 8}, "batch_size": 16,
                                       **extra})


def _trainer(cfg: TrainConfig, train, val, out, **options) -> Trainer:
    """The explicit step, then the trainer: as the library's callers do it."""
    return Trainer(resolve_recipe(cfg, train, len(CLASSES), run_dir=out), train, val, CLASSES, out, progress=False,
                   **options)


def test_a_config_that_sets_nothing_gets_the_from_scratch_recipe_and_says_why(tmp_path):
    train, val = _splits(), _splits(seed=1)
    trainer = _trainer(_mlp(), train, val, tmp_path)
    cfg = trainer.cfg
    assert cfg.is_complete and (cfg.optim.name, cfg.optim.weight_decay, cfg.optim.schedule) == ("sgd", 5e-4, "cosine")
    steps = batches_per_epoch(200, 16)  # 13 steps an epoch: the recipe asks ~TARGET_STEPS, at most 100 epochs
    assert cfg.epochs == min(100, -(-TARGET_STEPS // steps))
    assert RECIPES["scratch"].lr_range[0] <= cfg.optim.lr <= RECIPES["scratch"].lr_range[1]
    trainer.fit(stop_after=1)
    header = [line for line in (tmp_path / "config.yaml").read_text().splitlines() if line.startswith("#")]
    assert any(line.startswith("# optim.lr: lr range test") for line in header)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["optim"]["lr"] == cfg.optim.lr
    recipe = json.loads((tmp_path / "recipe.json").read_text())
    assert recipe["family"] == "from scratch" and recipe["requested"]["optim"]["lr"] is None
    assert len(recipe["lr_range_test"]["lrs"]) == len(recipe["lr_range_test"]["losses"]) > 10
    resumed = _trainer(_mlp(), train, val, tmp_path)  # the same request, resumed
    assert resumed.cfg == cfg and json.loads((tmp_path / "recipe.json").read_text()) == recipe
    assert len(resumed.fit(stop_after=1).history) == 2  # it went on from its first epoch


def test_constructing_a_trainer_never_trains_an_unresolved_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="resolve_recipe"):
        Trainer(_mlp(), _splits(), _splits(seed=1), CLASSES, tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


def test_the_range_test_runs_once_per_data_backbone_and_batch(tmp_path, monkeypatch):
    from mavias.core.train import recipe as recipe_module

    train = _splits()
    first = resolve_recipe(_mlp(), train, len(CLASSES), run_dir=tmp_path / "reference")
    monkeypatch.setattr(recipe_module, "_range_test", lambda *args: pytest.fail("the range test ran again"))
    other_method = resolve_recipe(_mlp(method="mavias"), train, len(CLASSES), run_dir=tmp_path / "mavias")
    assert other_method.config.optim.lr == first.config.optim.lr
    assert other_method.range_test == first.range_test
    monkeypatch.undo()
    other_batch = resolve_recipe(_mlp(batch_size=32), train, len(CLASSES), run_dir=tmp_path / "batch-32")
    assert other_batch.range_test != first.range_test  # another batch size: a test of its own


def test_every_debiasing_method_gets_three_times_the_recipes_steps_and_the_erm_reference_one():
    train = _splits(n=2000)
    methods = ("erm", "mavias", "jtt", "lff", "sd", "flac", "debian", "groupdro")
    lengths = {method: choose_training_settings(_mlp(method=method, optim={"lr": 0.01}), train, 2,
                                                torch.device("cpu"))
               for method in methods}
    steps = batches_per_epoch(2000, 16)
    assert lengths["erm"].config.epochs == -(-TARGET_STEPS // steps)
    for method in methods[1:]:
        assert lengths[method].config.epochs == -(-3 * TARGET_STEPS // steps)
        assert f"3 x the from scratch recipe's for {method}" in lengths[method].notes["epochs"]
    matched = choose_training_settings(_mlp(method="mavias", length_factor=1, optim={"lr": 0.01}), train, 2,
                                       torch.device("cpu"))
    assert matched.config.epochs == lengths["erm"].config.epochs  # equal compute, as `bench core --compute 1` asks


def test_what_the_user_sets_wins_and_no_range_test_runs(tmp_path):
    cfg = _mlp(epochs=3, validate_every=1, patience=0,
               optim={"lr": 0.02, "name": "adam", "weight_decay": 0.0, "schedule": "none"})
    trainer = _trainer(cfg, _splits(), _splits(seed=1), tmp_path)
    assert trainer.cfg == cfg and trainer.recipe.range_test is None and trainer.recipe.notes == {}


def test_the_range_test_suggests_a_tenth_of_a_sharp_minimum_or_says_it_cannot():
    lrs = np.logspace(-5, 1, 100)
    # falls fastest around lr 1e-3, keeps falling to its minimum at lr 0.3, then blows up
    losses = 2.3 - 1.5 / (1 + np.exp(-(np.log10(lrs) + 3) * 4)) - 0.2 * np.log10(lrs / 1e-5) / 4.5
    losses[lrs > 0.3] += 5 * np.log10(lrs[lrs > 0.3] / 0.3)
    lr, reason = suggest(lrs, losses)
    assert lr == pytest.approx(0.03, rel=0.2) and "a tenth of lr" in reason
    assert steepest(lrs, losses) == pytest.approx(1e-3, rel=0.3)
    assert suggest(lrs, np.full(100, 2.3))[0] is None  # a flat loss says nothing
    exploded = losses.copy()
    exploded[50:] = np.nan
    none, why = suggest(lrs, exploded)
    assert none is None and "diverged" in why


def _valley(lrs: np.ndarray, flat_from: float, flat_to: float) -> np.ndarray:
    """A loss that falls to about 0.8 by ``flat_from``, lies flat to ``flat_to``, then climbs."""
    falling = 2.3 - 1.5 / (1 + np.exp(-(np.log10(lrs) - np.log10(flat_from) + 1) * 3))
    return falling + np.where(lrs > flat_to, 3 * np.log10(lrs / flat_to), 0.0)


def test_in_a_flat_valley_the_suggestion_follows_its_upper_end_not_where_noise_puts_the_minimum():
    lrs = np.logspace(-5, 1, 100)
    suggestions = []
    for seed in range(5):  # the minimum moves with the noise between 0.25 and 0.7; the valley's upper end does not
        noise = np.random.default_rng(seed).normal(0, 0.01, 100) * (lrs > 0.2)
        lr, reason = suggest(lrs, _valley(lrs, 0.25, 0.7) + noise)
        suggestions.append(lr)
        assert "the upper end of the smoothed loss's valley" in reason
    assert 0.06 <= min(suggestions) and max(suggestions) <= 0.08


def test_a_valley_wider_than_the_cap_is_followed_to_three_times_its_lowest_point():
    lrs = np.logspace(-5, 1, 100)
    losses = _valley(lrs, 0.01, 3.0)
    lowest = int(np.argmin(np.abs(lrs - 0.02)))
    losses[lowest] -= 0.05  # a clear minimum at lr 0.02 in a valley that lies flat to lr 3
    lr, reason = suggest(lrs, losses)
    assert lr == pytest.approx(3 * lrs[lowest] / 10) and "3 x its lowest point" in reason


def test_a_cached_curve_gets_the_current_rules_suggestion_not_the_one_stored_with_it():
    lrs = np.logspace(-5, 1, 100)
    losses = _valley(lrs, 0.25, 0.7)
    stored = {"lrs": list(lrs), "losses": list(losses), "suggestion": 123.0, "reason": "an older rule", "steps": 100}
    tested = from_curve(stored["lrs"], stored["losses"], stored["steps"])
    assert (tested.suggestion, tested.reason) == suggest(lrs, losses) and tested.steps == 100
    assert tested.steepest == steepest(lrs, losses)


def test_a_cosine_schedule_warms_up_then_anneals_to_zero():
    optim = _mlp(optim={"schedule": "cosine", "warmup_fraction": 0.1}).optim
    factors = [schedule_factor(optim, step, epochs=10, steps_per_epoch=10) for step in range(100)]
    assert factors[0] == pytest.approx(1 / 11) and factors[9] == pytest.approx(10 / 11)
    assert factors[10] == 1.0 and factors[-1] < 0.001 and all(a >= b for a, b in zip(factors[10:], factors[11:]))


def test_a_last_batch_of_one_sample_is_dropped():
    assert drop_last(65, 64) and batches_per_epoch(65, 64) == 1
    assert not drop_last(66, 64) and batches_per_epoch(66, 64) == 2
    assert not drop_last(1, 64) and batches_per_epoch(64, 64) == 1


def test_a_dataset_smaller_than_the_batch_gets_a_smaller_batch(tmp_path):
    trainer = _trainer(_mlp(batch_size=64, epochs=2), _splits(40), _splits(20, 1), tmp_path)
    assert trainer.cfg.batch_size == 20 and "batch_size" in trainer.recipe.notes


def test_image_size_comes_from_the_data_and_pretrained_backbones_get_224(tmp_path):
    for i, (w, h) in enumerate([(40, 30), (48, 36), (50, 32)]):
        Image.new("RGB", (w, h)).save(tmp_path / f"{i}.png")
    manifest = pd.DataFrame({"uri": [f"{i}.png" for i in range(3)], "split": "train"})
    assert median_shorter_side(manifest, tmp_path) == 32
    scratch, notes = choose_image_settings(TrainConfig(), manifest, tmp_path)
    p = scratch.preprocessing
    assert (scratch.image_size, p.augment, p.flip) == (32, True, False) and "median" in notes["image_size"]
    pretrained, _ = choose_image_settings(TrainConfig(backbone={"name": "resnet18", "pretrained": True}), manifest,
                                           tmp_path)
    assert (pretrained.image_size, pretrained.preprocessing.augment, pretrained.preprocessing.flip) == (224, True, True)
    assert recipe_for(BackboneConfig(name="vit_b_16", pretrained=True)).optimizer == "adamw"


def test_divergence_stops_with_what_to_change(tmp_path):
    with pytest.raises(UserError, match="training diverged .* Lower optim.lr"):
        _trainer(_mlp(epochs=3, optim={"lr": 1e12}), _splits(), _splits(seed=1), tmp_path).fit()
    assert not (tmp_path / "best_val_acc.pt").exists()


def test_a_model_no_better_than_a_trivial_rule_is_flagged():
    val = pd.DataFrame({"label": ["a"] * 90 + ["b"] * 10, "attr_colour": ["red"] * 85 + ["blue"] * 15})
    assert trivial_rates(val) == pytest.approx({"majority class": 0.9, "attribute colour": 0.95})
    warnings = chance_warnings(0.9, 0.5, 2, val)
    assert any("chance" in w for w in warnings) and any("majority class" in w for w in warnings)
    assert chance_warnings(0.99, 0.97, 2, val) == []


def test_the_recipe_validates_about_every_fifty_steps_and_stops_after_a_share_of_its_validations():
    small = choose_training_settings(_mlp(), _splits(200), len(CLASSES), torch.device("cpu"))
    steps = 200 // 16  # 12 full steps an epoch
    assert small.config.validate_every == -(-VALIDATION_STEPS // steps)
    validations = -(-small.config.epochs // small.config.validate_every)
    assert small.config.patience == max(3, -(-int(PATIENCE_SHARE * 100) * validations // 100))
    assert "validate_every" in small.notes and "patience" in small.notes
    large = choose_training_settings(_mlp(batch_size=8), _splits(1000), len(CLASSES), torch.device("cpu"))
    assert large.config.validate_every == 1  # an epoch of 125 steps is validated every time


def test_a_run_that_stops_learning_stops_early_and_a_resumed_run_stops_at_the_same_epoch(tmp_path):
    cfg = _mlp(epochs=40, validate_every=1, patience=3,
               optim={"lr": 1e-6, "name": "sgd", "weight_decay": 0.0, "schedule": "none"})  # learns nothing
    train, val = _splits(), _splits(seed=1)
    result = _trainer(cfg, train, val, tmp_path / "once").fit()
    summary = json.loads((tmp_path / "once" / "train_summary.json").read_text())
    assert result.completed and 20 <= summary["stopped_early_at"] < 40 and len(result.history) == summary["epochs"]
    interrupted = _trainer(cfg, train, val, tmp_path / "twice")
    interrupted.fit(stop_after=7)
    resumed = _trainer(cfg, train, val, tmp_path / "twice").fit(resume=True)
    assert len(resumed.history) == summary["epochs"]


def test_a_perfect_selection_score_stops_the_run_with_the_model_a_full_run_selects(tmp_path):
    cfg = _mlp(epochs=40, validate_every=1, patience=30,
               optim={"lr": 0.003, "name": "sgd", "weight_decay": 0.0, "schedule": "none"})
    train, val = _splits(200, 0, gap=4.0, noise=0.1), _splits(100, 1, gap=4.0, noise=0.1)  # separable
    stopped = _trainer(cfg, train, val, tmp_path / "stopped").fit()
    full = _trainer(cfg.model_copy(update={"patience": 0}), train, val, tmp_path / "full").fit()
    first_perfect = int(full.history.loc[full.history["val_acc"] == 1.0, "epoch"].min())
    assert 2 <= first_perfect < 20  # before the patience rule could stop anything (its second half)
    summary = json.loads((tmp_path / "stopped" / "train_summary.json").read_text())
    assert summary["stopped_early_at"] == first_perfect and len(full.history) == 40
    assert stopped.best["val_acc"] == full.best["val_acc"]
    assert (tmp_path / "stopped" / "early.pt").is_file()


def test_a_config_trained_as_written_is_validated_every_epoch_and_never_stopped(tmp_path):
    cfg = _mlp(epochs=4, optim={"lr": 1e-6, "name": "sgd", "weight_decay": 0.0, "schedule": "none"})
    result = Trainer(cfg, _splits(), _splits(seed=1), CLASSES, tmp_path, progress=False).fit()
    assert len(result.history) == 4 and result.history["val_acc"].notna().all()
