import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import (
    PRESET_DIR,
    SCRATCH_BACKBONES,
    BackboneConfig,
    TrainConfig,
    load_config,
    method_name,
)
from mavias.core.train.data import feature_split
from mavias.core.train.losses import mavias_loss
from mavias.core.train.model import BACKBONES, build_main_model
from mavias.core.train.recipe import resolve_recipe
from mavias.core.train.trainer import Trainer
from mavias.errors import UserError
from tests.support.training import make_trainer


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
def test_paper_presets_load_and_validate(preset):
    cfg = load_config(preset=preset, overrides={"mavias.lam": 0.45})
    assert cfg.method == "mavias" and cfg.mavias.lam == 0.45
    assert cfg.mavias.bias_path == "joint"  # the paper's setting, which the preset reproduces
    assert cfg.mavias.keep_class_name_tags  # the paper's B_i: another class's name is the judge's to decide
    assert cfg.optim.lr == 0.001 and cfg.optim.weight_decay == 0.0001


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
def test_a_paper_preset_trains_as_written_its_fixed_epochs_without_an_early_stop(preset):
    cfg = load_config(preset=preset)
    resolved = resolve_recipe(cfg, None, 2)  # complete: the recipe reads no training split and chooses nothing
    assert resolved.config == cfg and resolved.notes == {} and resolved.range_test is None
    assert (cfg.patience, cfg.validate_every) == (0, 1)


def test_waterbirds_preset_matches_the_paper():
    cfg = load_config(preset="waterbirds")
    assert (cfg.mavias.alpha, cfg.mavias.lam, cfg.epochs, cfg.batch_size) == (0.05, 0.6, 100, 64)
    assert (cfg.backbone.name, cfg.optim.name, cfg.optim.schedule) == ("resnet50", "sgd", "none")


def test_a_mapping_override_merges_into_the_preset_as_a_dotted_one_does():
    merged = load_config(preset="waterbirds", overrides={"mavias": {"alpha": 0.5}})
    dotted = load_config(preset="waterbirds", overrides={"mavias.alpha": 0.5})
    assert merged == dotted and (merged.mavias.alpha, merged.mavias.lam) == (0.5, 0.6)


def test_unknown_config_keys_and_presets_are_rejected(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mavias: {lamda: 0.5}\n")
    with pytest.raises(ValueError, match="lamda"):
        load_config(bad)
    with pytest.raises(ValueError, match="known presets"):
        load_config(preset="imagenet-1k")


def test_resnet18_with_local_weights_round_trip(tmp_path):
    torch.manual_seed(0)
    model = build_main_model(BackboneConfig(name="resnet18"), 3, 4)
    assert set(BACKBONES) >= {"small_cnn", "mlp"}
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 4) and model.feature_dim == 512
    weights = tmp_path / "resnet18.pt"
    torch.save({**model.backbone.state_dict(), "fc.weight": torch.zeros(1000, 512), "fc.bias": torch.zeros(1000)}, weights)
    loaded = build_main_model(BackboneConfig(name="resnet18", weights=str(weights)), 3, 4)
    for name, tensor in model.backbone.state_dict().items():
        assert torch.equal(tensor, loaded.backbone.state_dict()[name]), name


def test_missing_local_weights_say_what_to_do(tmp_path):
    with pytest.raises(UserError, match="save the state dict"):
        build_main_model(BackboneConfig(name="resnet18", weights=str(tmp_path / "absent.pt")), 3, 2)


@pytest.mark.parametrize(("content", "expect"), [(b"\x8c not a pickle", "cannot be read as a state dict"),
                                               (None, "hold a list, not a state dict")])
def test_local_weights_that_are_not_a_state_dict_are_named(tmp_path, content, expect):
    weights = tmp_path / "weights.pt"
    weights.write_bytes(content) if content else torch.save([torch.zeros(1)], weights)
    with pytest.raises(UserError, match=expect):
        build_main_model(BackboneConfig(name="resnet18", weights=str(weights)), 3, 2)


def test_weights_for_a_backbone_that_always_trains_from_scratch_are_refused():
    assert set(BACKBONES) == set(SCRATCH_BACKBONES)
    for name in SCRATCH_BACKBONES:
        with pytest.raises(ValueError, match=f"backbone.weights is set but {name} always trains from scratch"):
            BackboneConfig(name=name, weights="/weights.pt")


def test_an_unknown_timm_backbone_is_named():
    pytest.importorskip("timm")
    with pytest.raises(UserError, match="timm has no model 'nonexistent_net'"):
        build_main_model(BackboneConfig(name="timm:nonexistent_net"), 3, 2)


def test_an_image_size_beyond_any_training_resolution_is_refused():
    with pytest.raises(ValueError, match="less than or equal to 1024"):
        TrainConfig.model_validate({"image_size": 100_000})


def test_bias_logits_go_through_the_main_models_own_head_and_only_the_main_model_is_kept(tmp_path):
    """z_tag = head(g(e)) with the very head the main model uses; the checkpoint that evaluation and export load
    is that main model, without g."""
    frame = pd.DataFrame({"sample_id": ["a", "b", "c", "d"], "label": ["x", "y", "x", "y"],
                          "x0": [0.0, 1.0, 0.2, 0.9], "x1": [1.0, 0.0, 0.8, 0.1]})
    train = feature_split(frame, ["x", "y"])
    train.embeddings = torch.rand(4, 384)
    cfg = TrainConfig.model_validate({"method": "mavias", "backbone": {"name": "mlp", "width": 8}, "epochs": 1,
                                      "batch_size": 2, "optim": {"lr": 0.1}})
    trainer = make_trainer(cfg, train, train, ["x", "y"], tmp_path, progress=False)
    method = trainer.method
    assert method.model is trainer.model
    embeddings = train.embeddings
    features = method.projection(embeddings)
    assert torch.equal(method.tag_logits(embeddings), trainer.model.head(features))
    with torch.no_grad():
        trainer.model.head.weight.add_(1.0)  # a change to the main model's head changes the bias logits too
    assert torch.equal(method.tag_logits(embeddings), trainer.model.head(features))
    trainer.fit()
    served, _, _ = load_main_model(tmp_path / "best_val_acc.pt")
    inputs = train.inputs.cache
    assert torch.equal(served(inputs), trainer.model.eval()(inputs))
    assert not any(name.startswith("projection") for name in served.state_dict())


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
def test_a_preset_alignment_term_has_the_magnitude_the_papers_setting_implies(preset):
    """The paper's alphas were tuned with the authors' code, whose alignment term is the squared difference of the
    batch's Frobenius norms; a preset pairs them with that form, not with the ~2 x batch-size weaker per-sample one."""
    cfg = load_config(preset=preset)
    generator = torch.Generator().manual_seed(0)
    z_main = 3.0 * torch.randn(cfg.batch_size, 2, generator=generator)
    z_tag = torch.randn(cfg.batch_size, 2, generator=generator)
    y = torch.zeros(cfg.batch_size, dtype=torch.long)
    m = cfg.mavias
    term = mavias_loss(z_main, z_tag, y, alpha=m.alpha, lam=m.lam, align=m.align).total - F.cross_entropy(z_main + z_tag, y)
    authors = m.alpha * (z_main.norm() - m.lam * z_tag.norm()) ** 2
    assert term.item() == pytest.approx(authors.item(), rel=1e-5)
    per_sample = m.alpha * 0.5 * ((z_main.norm(dim=1) - m.lam * z_tag.norm(dim=1)) ** 2).mean()
    assert term.item() > 50 * per_sample.item()


def _shortcut_features(n: int = 64, seed: int = 0):
    """Two classes whose bias embedding (dimension 0 = the class's shortcut word) predicts the label exactly."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 2
    frame = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "label": ["x" if v == 0 else "y" for v in labels],
                          "x0": torch.rand(n, generator=generator).tolist(), "x1": torch.rand(n, generator=generator).tolist()})
    train = feature_split(frame, ["x", "y"])
    embeddings = 0.05 * torch.randn(n, 16, generator=generator)
    embeddings[:, 0] += torch.where(labels == 0, -1.0, 1.0)
    train.embeddings = embeddings
    return train


def _mavias_trainer(tmp_path, train, bias_path: str) -> Trainer:
    cfg = TrainConfig.model_validate({"method": "mavias", "backbone": {"name": "mlp", "width": 8}, "epochs": 1,
                                      "batch_size": 16, "optim": {"lr": 0.1}, "mavias": {"bias_path": bias_path}})
    return make_trainer(cfg, train, train, ["x", "y"], tmp_path, progress=False)


def test_an_experts_bias_path_starts_fitted_and_keeps_the_main_loss_out_of_g(tmp_path):
    """experts: g is fitted to the labels before the first step (head untouched), the main model's CE and the
    alignment never reach g, and g's own CE never reaches the main model."""
    train = _shortcut_features()
    trainer = _mavias_trainer(tmp_path, train, "experts")
    method, head = trainer.method, trainer.model.head
    head_before = head.weight.detach().clone()
    method.prepare(trainer._fit_plain)
    assert method.bias_fitted and torch.equal(head.weight, head_before)
    assert (method.tag_logits(train.embeddings).argmax(1) == train.labels).float().mean() == 1.0
    x, y, idx = train.inputs.cache[:16], train.labels[:16], torch.arange(16)
    loss, stats = method.loss(x, y, idx)
    assert stats["acc_tag"] == 1.0  # logged per epoch (train_acc_tag): whether the bias path carries the shortcut
    loss.backward()
    g_grad = method.projection.weight.grad.clone()
    own_ce = F.cross_entropy(F.linear(method.projection(train.embeddings[idx]), head.weight.detach(), head.bias.detach()), y)
    expected = torch.autograd.grad(own_ce, method.projection.weight)[0]
    assert torch.allclose(g_grad, expected, atol=1e-6)
    head_grad = head.weight.grad.clone()
    head.weight.grad = None
    z_tag = method.tag_logits(train.embeddings[idx]).detach()
    m = trainer.cfg.mavias
    main_only = mavias_loss(trainer.model(x), z_tag, y, alpha=m.alpha, lam=m.lam, align=m.align).total
    assert torch.allclose(head_grad, torch.autograd.grad(main_only, head.weight)[0], atol=1e-6)


def test_the_fitted_bias_path_is_not_fitted_again_on_resume(tmp_path):
    train = _shortcut_features()
    trainer = _mavias_trainer(tmp_path, train, "experts")
    trainer.fit()
    state = trainer.method.state_dict()
    assert state == {"bias_fitted": True}
    resumed = _mavias_trainer(tmp_path / "again", train, "experts")
    resumed.method.load_state_dict(state)
    before = resumed.method.projection.weight.detach().clone()
    resumed.method.prepare(resumed._fit_plain)
    assert torch.equal(resumed.method.projection.weight, before)


def test_joint_bias_path_is_the_papers_single_loss(tmp_path):
    train = _shortcut_features()
    trainer = _mavias_trainer(tmp_path, train, "joint")
    method = trainer.method
    method.prepare(trainer._fit_plain)
    assert not method.bias_fitted
    x, y, idx = train.inputs.cache[:16], train.labels[:16], torch.arange(16)
    loss, _ = method.loss(x, y, idx)
    m = trainer.cfg.mavias
    expected = mavias_loss(trainer.model(x), method.tag_logits(train.embeddings[idx]), y, alpha=m.alpha, lam=m.lam, align=m.align)
    assert loss.item() == pytest.approx(expected.total.item(), rel=1e-6)


def test_an_experts_bias_path_without_augmentation_is_warned_about(tmp_path, caplog):
    frame = pd.DataFrame({"sample_id": ["a", "b"], "label": ["x", "y"], "x0": [0.0, 1.0], "x1": [1.0, 0.0]})
    train = feature_split(frame, ["x", "y"])
    train.embeddings = torch.rand(2, 8)
    cfg = TrainConfig.model_validate({"method": "mavias", "backbone": {"name": "mlp", "width": 4}, "epochs": 1,
                                      "optim": {"lr": 0.1}, "preprocessing": {"augment": False}})
    trainer = make_trainer(cfg, train, train, ["x", "y"], tmp_path, progress=False)
    trainer.method.prepare(trainer._fit_plain)
    assert "without augmentation" not in caplog.text  # feature inputs have nothing to augment
    trainer.model.image_input = True
    trainer.method.bias_fitted = False
    trainer.method.prepare(trainer._fit_plain)
    assert "experts without augmentation" in caplog.text


def test_a_config_written_with_the_earlier_name_of_the_experts_path_still_loads():
    assert TrainConfig.model_validate({"mavias": {"bias_path": "separate"}}).mavias.bias_path == "experts"


def _cross_fitted_trainer(tmp_path, train, folds: int) -> Trainer:
    cfg = TrainConfig.model_validate({"method": "mavias", "backbone": {"name": "mlp", "width": 8}, "epochs": 1,
                                      "batch_size": 16, "optim": {"lr": 0.1},
                                      "mavias": {"bias_path": "experts", "bias_folds": folds}})
    return make_trainer(cfg, train, train, ["x", "y"], tmp_path, progress=False)


def _memorisable_features(n: int = 64):
    """Labels drawn at random and embeddings of pure noise: a g fitted on a sample can only have memorised it."""
    train = _shortcut_features(n)
    generator = torch.Generator().manual_seed(1)
    train.labels = torch.randint(2, (n,), generator=generator)
    train.embeddings = torch.randn(n, 128, generator=generator)
    return train


def test_a_single_bias_expert_memorises_labels_its_cross_fitted_copies_cannot(tmp_path):
    train = _memorisable_features()
    accuracies = {}
    for folds in (1, 5):
        method = _cross_fitted_trainer(tmp_path / str(folds), train, folds).method
        method.prepare(None)
        x, idx = train.inputs.cache, torch.arange(len(train.labels))
        _, stats = method.loss(x, train.labels, idx)
        accuracies[folds] = stats["acc_tag"]  # the bias logits the main model is trained against
    assert accuracies[1] >= 0.95  # one g fitted on every image explains each training label away
    assert accuracies[5] <= 0.75  # each image's logits come from a copy that never saw it: near chance (0.5)


def test_a_cross_fitted_copy_never_learns_from_its_own_fold(tmp_path):
    train = _memorisable_features()
    method = _cross_fitted_trainer(tmp_path, train, 4).method
    for label in (0, 1):  # every fold holds every class in proportion
        counts = torch.bincount(method.fold[train.labels == label], minlength=4)
        assert counts.max() - counts.min() <= 1
    idx = (method.fold == 2).nonzero().squeeze(1)  # a batch of fold 2 alone
    loss, _ = method.loss(train.inputs.cache[idx], train.labels[idx], idx)
    loss.backward()
    grads = [copy.weight.grad for copy in method.projection]
    assert grads[2] is None or torch.count_nonzero(grads[2]) == 0
    head = method.model.head
    for k in (0, 1, 3):  # each copy learns from its batch samples at the rate of a single expert: its own mean CE
        copy = method.projection[k]
        own = F.cross_entropy(F.linear(copy(train.embeddings[idx]), head.weight.detach(), head.bias.detach()),
                              train.labels[idx])
        assert torch.allclose(grads[k], torch.autograd.grad(own, copy.weight)[0], atol=1e-6)


def test_cross_fitting_needs_the_experts_bias_path_and_names_itself():
    with pytest.raises(UserError, match="bias_path experts or mavias.bias_folds 1"):
        load_config(overrides={"method": "mavias", "mavias.bias_path": "joint", "mavias.bias_folds": 5})
    assert method_name(TrainConfig.model_validate({"mavias": {"bias_folds": 5}})) == "MAVias-PoE-CF"
    assert method_name(TrainConfig()) == "MAVias-PoE"
