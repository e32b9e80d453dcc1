"""Backbones (a registry), the main model f = head(backbone(x)) and the projection g of the bias embeddings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from mavias.core.train.config import BackboneConfig
from mavias.errors import UserError
from mavias.utils.torchfile import TORCH_LOAD_ERRORS, load_error_reason

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


def _strip_classifier(net: nn.Module) -> tuple[nn.Module, int, str]:
    """Replace the last Linear layer (the ImageNet classifier) by Identity: (net, feature dim, its module name)."""
    name, last = [(n, m) for n, m in net.named_modules() if isinstance(m, nn.Linear)][-1]
    parent = net.get_submodule(name.rpartition(".")[0]) if "." in name else net
    setattr(parent, name.rpartition(".")[2], nn.Identity())
    return net, last.in_features, name


def pretrained_cache_path(cfg: BackboneConfig) -> Path:
    """Where torchvision's weights enum keeps ``cfg.pretrained_weights`` of ``cfg.name`` ($TORCH_HOME/hub/checkpoints)."""
    import torchvision

    try:
        weights = torchvision.models.get_model_weights(cfg.name)[cfg.pretrained_weights]
    except KeyError:
        known = [w.name for w in torchvision.models.get_model_weights(cfg.name)]
        raise UserError(f"{cfg.name} has no weights {cfg.pretrained_weights!r}; use one of {known}") from None
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name


def weights_file(cfg: BackboneConfig) -> Path | None:
    """Offline-first: ``backbone.weights`` (a local file) or torchvision's cache; never a silent random init.

    ``None`` when the backbone trains from scratch; a :class:`UserError` saying where to put a missing file.
    """
    if cfg.weights:
        path = Path(cfg.weights)
        if not path.exists():
            raise UserError(
                f"backbone weights {path} not found; download them once where the internet is reachable "
                f"(e.g. torchvision.models.ResNet50_Weights.IMAGENET1K_V1) and save the state dict there"
            )
        return path
    if not cfg.pretrained or cfg.name in BACKBONES:
        return None
    if cfg.name.startswith("timm:"):
        raise UserError(f"{cfg.name}: timm backbones load local weights only; set backbone.weights: /path/to/state_dict")
    path = pretrained_cache_path(cfg)
    if not path.exists():
        raise UserError(
            f"{cfg.name} expects ImageNet weights ({cfg.pretrained_weights}) but {path} does not exist. Put the file "
            f"there (where the internet is reachable: python -c \"import torchvision; torchvision.models.get_model("
            f"'{cfg.name}', weights='{cfg.pretrained_weights}')\" with the same TORCH_HOME), or pass "
            "backbone.weights: /path/to/state_dict.pth, or train from scratch with backbone.pretrained: false"
        )
    return path


STATE_DICT_HINT = "pass backbone.weights the file torch.save(model.state_dict(), PATH) wrote"


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except TORCH_LOAD_ERRORS as error:
        raise UserError(f"backbone weights {path} cannot be read as a state dict ({load_error_reason(error)})",
                        hint=STATE_DICT_HINT) from None
    if not isinstance(state, dict):
        raise UserError(f"backbone weights {path} hold a {type(state).__name__}, not a state dict",
                        hint=STATE_DICT_HINT)
    return state


def _torchvision(cfg: BackboneConfig, in_channels: int) -> tuple[nn.Module, int]:
    """Any torchvision classifier by name, its classifier layer removed; weights as :func:`weights_file`."""
    import torchvision

    if cfg.name not in torchvision.models.list_models(module=torchvision.models):
        raise UserError(f"unknown backbone {cfg.name!r}; use {sorted(BACKBONES)}, a torchvision classifier "
                        "(torchvision.models.list_models()) or timm:<name>")
    if in_channels != 3:
        raise UserError(f"{cfg.name} expects RGB images (3 channels), got {in_channels}")
    net, feature_dim, head_name = _strip_classifier(torchvision.models.get_model(cfg.name, weights=None))
    path = weights_file(cfg)
    if path is not None:
        _load_backbone_state(net, _read_state(path), head_name, path)
    return net, feature_dim


def _timm(cfg: BackboneConfig, in_channels: int) -> tuple[nn.Module, int]:
    """``timm:<name>`` (optional dependency): random init, or ``backbone.weights`` as a local state dict."""
    try:
        import timm
    except ImportError:
        raise UserError(f"backbone {cfg.name!r} needs the optional package timm: pip install timm") from None
    name = cfg.name.removeprefix("timm:")
    if ":" not in name and not timm.is_model(name):  # a source prefix (hf-hub:, local-dir:) names its own model
        raise UserError(f"timm has no model {name!r}", hint="timm.list_models() lists them, e.g. timm:resnet18")
    net = timm.create_model(name, pretrained=False, num_classes=0, in_chans=in_channels)
    path = weights_file(cfg)
    if path is not None:
        missing, _ = net.load_state_dict(_read_state(path), strict=False)
        if missing:
            raise UserError(f"weights {path} do not fit {cfg.name}: missing {missing[:3]}")
    return net, net.num_features


def _load_backbone_state(net: nn.Module, state: dict[str, torch.Tensor], head_name: str, source: Path) -> None:
    """Load a full classifier's state dict (e.g. ImageNet weights) into the classifier-less backbone."""
    head = f"{head_name}."
    state = {k: v for k, v in state.items() if not k.startswith(head)}
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UserError(f"weights {source} do not fit: missing {missing[:3]}, unexpected {unexpected[:3]}")


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
    """The registered backbones by name, ``timm:<name>``, else any torchvision classifier by name."""
    factory = BACKBONES.get(cfg.name) or (_timm if cfg.name.startswith("timm:") else _torchvision)
    backbone, feature_dim = factory(cfg, in_channels)
    return MainModel(backbone, feature_dim, num_classes, image_input=cfg.name != "mlp")


def build_projection(embedding_dim: int, feature_dim: int) -> nn.Linear:
    """g_phi: one dense layer from the bias-embedding space to the backbone's feature space (paper, Model Architectures)."""
    return nn.Linear(embedding_dim, feature_dim)
