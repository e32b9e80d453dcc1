"""Backbones (a registry), the main model f = head(backbone(x)) and the projection g of the bias embeddings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from mavias.train.config import BackboneConfig

BackboneFactory = Callable[[BackboneConfig, int], tuple[nn.Module, int]]
BACKBONES: dict[str, BackboneFactory] = {}


def register_backbone(name: str) -> Callable[[BackboneFactory], BackboneFactory]:
    def wrap(factory: BackboneFactory) -> BackboneFactory:
        BACKBONES[name] = factory
        return factory

    return wrap


def _conv_block(c_in: int, c_out: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride=2, padding=kernel // 2, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)
    )


@register_backbone("small_cnn")
def small_cnn(cfg: BackboneConfig, in_channels: int) -> tuple[nn.Module, int]:
    """Four strided conv blocks + global pooling: fast enough for CPU benchmarks at 64 px."""
    w = cfg.width
    net = nn.Sequential(
        _conv_block(in_channels, w, 5),
        _conv_block(w, 2 * w, 3),
        _conv_block(2 * w, 4 * w, 3),
        _conv_block(4 * w, 4 * w, 3),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )
    return net, 4 * w


@register_backbone("mlp")
def mlp(cfg: BackboneConfig, in_features: int) -> tuple[nn.Module, int]:
    w = cfg.width
    return nn.Sequential(nn.Linear(in_features, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU()), w


def _torchvision_resnet(arch: str) -> BackboneFactory:
    def factory(cfg: BackboneConfig, in_channels: int) -> tuple[nn.Module, int]:
        import torchvision

        if in_channels != 3:
            raise ValueError(f"{arch} expects RGB images (3 channels), got {in_channels}")
        net = getattr(torchvision.models, arch)(weights=None)
        if cfg.weights:
            _load_local_weights(net, Path(cfg.weights))
        feature_dim = net.fc.in_features
        net.fc = nn.Identity()
        return net, feature_dim

    return factory


for _arch in ("resnet18", "resnet50"):
    register_backbone(_arch)(_torchvision_resnet(_arch))


def _load_local_weights(net: nn.Module, path: Path) -> None:
    """Load e.g. ImageNet weights saved with torch.save(model.state_dict()) (the classifier fc is dropped)."""
    if not path.exists():
        raise FileNotFoundError(
            f"backbone weights {path} not found; download them once where the internet is reachable "
            f"(e.g. torchvision.models.ResNet50_Weights.IMAGENET1K_V2) and save the state dict there"
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing, unexpected = net.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("fc.")]
    if missing or unexpected:
        raise ValueError(f"weights {path} do not fit: missing {missing[:3]}, unexpected {unexpected[:3]}")


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class MainModel(nn.Module):
    """f_theta: normalise -> backbone -> features h -> linear head -> z_main. The only part exported and served.

    Images enter as float RGB in [0, 1] (NCHW); the ImageNet normalisation is part of the model so that the
    exported ONNX graph needs no preprocessing beyond decoding and resizing.
    """

    def __init__(self, backbone: nn.Module, feature_dim: int, num_classes: int, *, image_input: bool):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feature_dim, num_classes)
        self.feature_dim = feature_dim
        self.image_input = image_input
        shape = (1, 3, 1, 1) if image_input else (1, 1)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN if image_input else (0.0,)).reshape(shape))
        self.register_buffer("std", torch.tensor(IMAGENET_STD if image_input else (1.0,)).reshape(shape))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone((x - self.mean) / self.std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build_main_model(cfg: BackboneConfig, in_channels: int, num_classes: int) -> MainModel:
    if cfg.name not in BACKBONES:
        raise ValueError(f"unknown backbone {cfg.name!r}; known: {sorted(BACKBONES)}")
    backbone, feature_dim = BACKBONES[cfg.name](cfg, in_channels)
    return MainModel(backbone, feature_dim, num_classes, image_input=cfg.name != "mlp")


def build_projection(embedding_dim: int, feature_dim: int) -> nn.Linear:
    """g_phi: one dense layer from the bias-embedding space to the backbone's feature space (paper, Model Architectures)."""
    return nn.Linear(embedding_dim, feature_dim)
