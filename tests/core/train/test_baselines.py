"""The baselines are wired as their reference implementations train them: JTT's error set from un-augmented images,
FLAC-B's bias classifier the trained reference, DebiAN's two networks stepping in turn, MAVias's joint path routing
z_tag's gradient to the projection and the shared head, and the oracle's own selection criterion."""

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from mavias.core.train.config import TrainConfig
from mavias.core.train.data import attach_groups, image_split
from mavias.core.train.inference import predict_logits
from mavias.core.train.methods import JTT, DebiAN, Mavias, build_method
from mavias.core.train.model import build_main_model
from mavias.core.train.transforms import split_transforms
from mavias.errors import UserError
from tests.core.train.test_trainer import CLASSES, _cfg
from tests.support.training import erm_checkpoint, make_trainer


@pytest.fixture(scope="module")
def augmented(tmp_path_factory):
    """A training split of 40 images through random crops, and its config."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(40):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    frame = pd.DataFrame({"sample_id": [f"s{i}" for i in range(40)], "uri": [f"{i}.png" for i in range(40)],
                          "label": [CLASSES[i % 2] for i in range(40)], "split": "train"})
    cfg = TrainConfig.model_validate({"method": "jtt", "backbone": {"name": "small_cnn", "width": 4},
                                      "image_size": 16, "preprocessing": {"augment": True, "flip": False},
                                      "jtt": {"id_epochs": 1}})
    transforms = split_transforms(cfg)
    split = image_split(frame, folder, CLASSES, transforms.train, 16, random=True, plain=transforms.eval,
                        progress=False)
    return split, cfg


def test_jtt_counts_the_errors_of_the_unaugmented_images(augmented):
    split, cfg = augmented
    assert split.augmented and not split.unaugmented().augmented
    assert torch.equal(split.unaugmented().inputs[3], split.unaugmented().inputs[3])  # no random crop
    found = []
    for _ in range(2):
        torch.manual_seed(0)
        jtt = JTT(cfg, build_main_model(cfg.backbone, 3, 2), split)
        jtt.prepare(lambda model, epochs: None)  # the identification model stays at its initial weights
        expected = predict_logits(jtt.model, split.unaugmented(), batch_size=64).argmax(1) != split.labels
        assert torch.equal(jtt.errors, expected)
        found.append(jtt.errors)
    assert torch.equal(*found)


def test_flac_b_takes_the_trained_reference_as_its_frozen_bias_classifier(tmp_path):
    from mavias.core.train.data import feature_split
    from tests.core.train.test_trainer import _frame

    train, val = feature_split(_frame(128, 0), CLASSES), feature_split(_frame(64, 1), CLASSES)
    cfg = _cfg("flac")
    reference = erm_checkpoint(train, val, CLASSES, tmp_path / "erm", cfg)
    trainer = make_trainer(cfg, train, val, CLASSES, tmp_path / "flac", progress=False, reference=reference)
    saved = torch.load(reference, weights_only=True)["model"]
    bias_model = trainer.method.bias_model
    assert all(torch.equal(saved[name], tensor) for name, tensor in bias_model.state_dict().items())
    assert not any(p.requires_grad for p in bias_model.parameters())
    trainer.fit()
    assert all(torch.equal(saved[name], tensor) for name, tensor in bias_model.state_dict().items())  # frozen
    with pytest.raises(UserError, match="pass --reference ERM_RUN"):
        build_method(cfg, build_main_model(cfg.backbone, 3, 2), train)


def test_debian_steps_the_discoverer_with_its_own_optimizer_the_classifier_in_eval(tmp_path):
    from mavias.core.train.data import feature_split
    from tests.core.train.test_trainer import _frame

    train = feature_split(_frame(64, 0), CLASSES)
    cfg = _cfg("debian").model_copy(update={"optim": _cfg("debian").optim.model_copy(
        update={"name": "sgd", "weight_decay": 0.0})})
    model = build_main_model(cfg.backbone, 3, 2)
    debian = DebiAN(cfg, model, train)
    classifier_params = {id(p) for group in debian.param_groups() for p in group["params"]}
    assert not classifier_params & {id(p) for p in debian.discoverer.parameters()}  # two optimizers, disjoint
    modes = []
    original = debian.model.forward
    debian.model.forward = lambda x: (modes.append(debian.model.training), original(x))[1]
    before = [p.detach().clone() for p in debian.discoverer.parameters()]
    x, y = train.inputs[:16], train.labels[:16]
    loss, stats = debian.loss(x, y, torch.arange(16))
    assert modes == [True, False] and debian.model.training  # its own step, then the discoverer's (classifier in eval)
    assert any(not torch.equal(a, b) for a, b in zip(before, debian.discoverer.parameters()))
    assert loss.requires_grad and "loss_discoverer" in stats
    own = [p.grad.clone() for p in debian.discoverer.parameters()]  # from the discoverer's own step
    loss.backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(own, debian.discoverer.parameters()))  # untouched by the loss


@pytest.mark.parametrize("path", ["joint", "experts"])
def test_mavias_routes_the_bias_logits_gradient_by_its_bias_path(path):
    from mavias.core.train.data import feature_split
    from tests.core.train.test_trainer import _frame

    train = feature_split(_frame(32, 0), CLASSES)
    train.embeddings = torch.randn(32, 4)
    cfg = _cfg("mavias").model_copy(update={"mavias": _cfg("mavias").mavias.model_copy(
        update={"bias_path": path, "alpha": 0.0})})
    torch.manual_seed(0)
    method = Mavias(cfg, build_main_model(cfg.backbone, 3, 2), train)
    x, y, idx = train.inputs[:8], train.labels[:8], torch.arange(8)
    method.loss(x, y, idx)[0].backward()
    with_tag_head = method.model.head.weight.grad.clone()
    assert method.projection.weight.grad.abs().sum() > 0  # g learns (through the CE of z_main + z_tag, or its own)
    method.model.zero_grad()
    method.projection.zero_grad()
    z_tag = method.tag_logits(train.embeddings[idx]).detach()
    torch.nn.functional.cross_entropy(method.model(x) + z_tag, y).backward()
    main_only_head = method.model.head.weight.grad
    if path == "joint":  # the shared head also learns from z_tag = head(g(e))
        assert not torch.allclose(with_tag_head, main_only_head)
    else:  # the main model sees z_tag fixed; the bias expert's own CE reaches g, not the head
        assert torch.allclose(with_tag_head, main_only_head, atol=1e-6)


def test_the_oracle_can_select_on_the_true_groups(tmp_path):
    from mavias.core.train.data import feature_split
    from tests.core.train.test_trainer import _frame

    train, val = feature_split(_frame(128, 0), CLASSES), feature_split(_frame(64, 1), CLASSES)
    for split in (train, val):
        attach_groups(split, split.frame["label"] + "|" + (split.frame["x3"] > 1).astype(str),
                      ["a|False", "a|True", "b|False", "b|True"])
    run = make_trainer(_cfg("groupdro", selection="val_true_wg"), train, val, CLASSES, tmp_path,
                       progress=False).fit()
    assert run.history["val_true_wg"].max() == pytest.approx(run.best["val_true_wg"]["score"])
    assert (tmp_path / "best_val_true_wg.pt").is_file()
