import pytest
import torch

from mavias.errors import UserError
from mavias.train.config import PRESET_DIR, BackboneConfig, load_config
from mavias.train.model import BACKBONES, build_main_model, build_projection


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
def test_paper_presets_load_and_validate(preset):
    cfg = load_config(preset=preset, overrides={"mavias.lam": 0.45})
    assert cfg.method == "mavias" and cfg.mavias.lam == 0.45
    assert cfg.optim.lr == 0.001 and cfg.optim.weight_decay == 0.0001


def test_waterbirds_preset_matches_the_paper():
    cfg = load_config(preset="waterbirds")
    assert (cfg.mavias.alpha, cfg.mavias.lam, cfg.epochs, cfg.batch_size) == (0.05, 0.6, 100, 64)
    assert (cfg.backbone.name, cfg.optim.name, cfg.optim.schedule) == ("resnet50", "sgd", "none")


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


def test_projection_maps_embeddings_into_the_feature_space_and_is_not_part_of_the_main_model():
    model = build_main_model(BackboneConfig(width=8), 3, 3)
    projection = build_projection(384, model.feature_dim)
    z_tag = model.head(projection(torch.rand(5, 384)))
    assert z_tag.shape == (5, 3)
    assert not any(p is q for p in model.parameters() for q in projection.parameters())
