"""Training configuration: validated at load, saved resolved next to the outputs, with the paper's presets."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mavias.errors import UserError, describe_validation_error
from mavias.utils.atomic import atomic_path

PRESET_DIR = Path(__file__).parent / "presets"


class ConfigError(UserError, ValueError):
    """A training config that cannot be used: missing file, bad YAML, unknown preset, invalid value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BackboneConfig(_Strict):
    name: Literal["small_cnn", "mlp", "resnet18", "resnet50"] = "small_cnn"
    width: int = Field(32, ge=4, description="small_cnn base channels / mlp hidden units")
    weights: str | None = Field(None, description="local state-dict path for torchvision backbones (offline)")


class OptimConfig(_Strict):
    name: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(1e-3, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(1e-4, ge=0)
    schedule: Literal["none", "step_thirds"] = Field(
        "none", description="step_thirds: lr / 10 after each third of the epochs (paper, CelebA and ImageNet-9)"
    )


class MaviasConfig(_Strict):
    alpha: float = Field(0.01, ge=0, description="weight of the logit-norm alignment loss")
    lam: float = Field(0.5, gt=0, description="lambda: target ratio ||z_main|| / ||z_tag||")
    align: Literal["per_sample", "batch"] = Field(
        "per_sample",
        description="per_sample: the paper's eq.; batch: Frobenius norms over the batch with z_tag detached (public code)",
    )
    projection_lr_mult: float = Field(1.0, gt=0, description="learning-rate multiplier of the projection layer g")


class GroupDROConfig(_Strict):
    eta: float = Field(0.01, gt=0, description="step size of the exponentiated-gradient update of group weights")


class JTTConfig(_Strict):
    id_epochs: int = Field(2, ge=1, description="epochs of the ERM identification model (stage 1)")
    upweight: float = Field(20.0, ge=1, description="sampling weight of stage-1 errors in stage 2")


Selection = Literal["val_acc", "val_tag_wg"]


class TrainConfig(_Strict):
    method: Literal["erm", "mavias", "groupdro", "jtt"] = "mavias"
    backbone: BackboneConfig = BackboneConfig()
    optim: OptimConfig = OptimConfig()
    mavias: MaviasConfig = MaviasConfig()
    groupdro: GroupDROConfig = GroupDROConfig()
    jtt: JTTConfig = JTTConfig()
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(64, ge=1)
    image_size: int = Field(64, ge=8)
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="mixed precision (bfloat16 autocast) when running on CUDA")
    selection: Selection = Field(
        "val_tag_wg",
        description="model selection: val_acc (paper) or worst-group accuracy over tag-derived validation groups",
    )
    num_workers: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.backbone.name == "mlp" and self.backbone.weights:
            raise ValueError("backbone.weights applies to torchvision backbones only")
        return self


def load_config(path: str | Path | None = None, *, preset: str | None = None, overrides: dict | None = None) -> TrainConfig:
    """Merge preset < YAML file < overrides (dotted keys allowed) and validate."""
    data: dict = {}
    if preset:
        data = _deep_merge(data, _read_yaml(preset_path(preset)))
    if path:
        data = _deep_merge(data, _read_yaml(Path(path)))
    for key, value in (overrides or {}).items():
        data = _deep_merge(data, _dotted(key, value))
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            describe_validation_error(error, what="training config") + "; fix the config file or the --set value"
        ) from None


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_path(name: str) -> Path:
    path = PRESET_DIR / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(preset_names())}")
    return path


def save_config(config: TrainConfig, path: str | Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return Path(path)


def _read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"config {path} does not exist (or is not a file)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"config {path} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping of settings, got {type(data).__name__}")
    return data


def _dotted(key: str, value) -> dict:
    out: dict = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _deep_merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
