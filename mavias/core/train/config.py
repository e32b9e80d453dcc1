"""Training configuration: validated at load, saved resolved next to the outputs, with the paper's presets."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mavias.core.encode.factory import MINILM, SPEC_FORMS, parse_encoder_spec
from mavias.errors import UserError, describe_validation_error
from mavias.utils.atomic import atomic_path
from mavias.utils.mappings import read_yaml_mapping, set_nested

PRESET_DIR = Path(__file__).parent / "presets"
SCRATCH_BACKBONES = ("small_cnn", "mlp")  # the project's own, never pretrained
MAX_IMAGE_SIZE = 1024  # a side larger than this is a typo, not a training resolution (a batch of 64 would need 800 MB)


class ConfigError(UserError, ValueError):
    """A training config that cannot be used: missing file, bad YAML, unknown preset, invalid value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BackboneConfig(_Strict):
    name: str = Field("small_cnn", description="small_cnn, mlp, any torchvision classifier (resnet18, resnet50…) or timm:<name>")
    width: int = Field(32, ge=4, description="small_cnn base channels / mlp hidden units")
    pretrained: bool = Field(False, description="torchvision ImageNet weights from $TORCH_HOME/hub/checkpoints (offline)")
    pretrained_weights: str = Field("IMAGENET1K_V1", description="torchvision weights enum member, e.g. IMAGENET1K_V2")
    weights: str | None = Field(None, description="local state-dict path (takes precedence over the cache)")

    @model_validator(mode="after")
    def _weights_for_a_backbone_that_loads_them(self) -> BackboneConfig:
        if self.weights and self.name in SCRATCH_BACKBONES:
            raise ValueError(f"backbone.weights is set but {self.name} always trains from scratch: weights load into "
                             "torchvision and timm backbones (e.g. backbone.name: resnet18)")
        return self


class PreprocessConfig(_Strict):
    """Image preprocessing (torchvision transforms v2 on PIL images); normalisation is inside the model."""

    augment: bool | None = Field(
        None, description="training: RandomResizedCrop(image_size) (+ flip); unset: the recipe's (on)")
    crop_scale: tuple[float, float] = Field((0.7, 1.0), description="RandomResizedCrop area range (GroupDRO's Waterbirds/CelebA)")
    crop_ratio: tuple[float, float] = Field((0.75, 4 / 3), description="RandomResizedCrop aspect-ratio range")
    flip: bool | None = Field(None, description="random horizontal flip when augment is on; unset: the recipe's (on "
                              "for pretrained backbones; off from scratch, where orientation may be the class)")
    resize: int | None = Field(
        None, ge=8, le=2 * MAX_IMAGE_SIZE,
        description="evaluation: shorter side resized to this, then CenterCrop(image_size); default image_size"
    )


Schedule = Literal["none", "step_thirds", "cosine"]


class OptimConfig(_Strict):
    """Unset fields come from the backbone family's recipe (:mod:`mavias.core.train.recipe`) when training starts; the run's
    config.yaml records the resolved values and why."""

    name: Literal["sgd", "adam", "adamw"] | None = Field(None, description="unset: sgd, adamw for vision transformers")
    lr: float | None = Field(None, gt=0, description="unset: found by a learning-rate range test before training")
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float | None = Field(None, ge=0, description="unset: 5e-4 from scratch, 1e-4 pretrained, 0.05 adamw")
    schedule: Schedule | None = Field(
        None, description="step_thirds: lr / 10 after 1/3 and 2/3 of the epochs (paper); cosine: linear warm-up over "
        "warmup_fraction of the steps, then cosine to 0; unset: cosine"
    )
    warmup_fraction: float = Field(0.05, ge=0, lt=1, description="share of the steps warmed up (cosine schedule)")


class MaviasConfig(_Strict):
    alpha: float = Field(0.01, ge=0, description="weight of the logit-norm alignment loss")
    lam: float = Field(0.5, gt=0, description="lambda: target ratio ||z_main|| / ||z_tag||")
    align: Literal["per_sample", "batch"] = Field(
        "per_sample",
        description="per_sample: the paper's eq.; batch: Frobenius norms over the batch with z_tag detached (public code)",
    )
    projection_lr_mult: float = Field(1.0, gt=0, description="learning-rate multiplier of the projection layer g")
    bias_path: Literal["experts", "joint"] = Field(
        "experts",
        description="experts (default; MAVias-PoE, a product of experts): g starts fitted to the labels and learns "
                    "on its own CE(z_tag), the main model sees z_tag detached; joint (MAVias as published): g learns "
                    "through CE(z_main + z_tag) only",
    )

    keep_class_name_tags: bool = Field(
        False, description="keep a tag that names another class of the task in an image's irrelevant tags when the "
                           "judge calls it irrelevant (the paper's B_i, the paper presets'); off: left out, as a word "
                           "a tagger gives a single-label image mostly when it confuses the object")
    bias_folds: int = Field(
        1, ge=1, le=20,
        description="experts path only: K > 1 cross-fits the bias expert: K copies of g, copy k never learns from "
                    "fold k of the training split, and each image's bias logits come from the copy that never saw "
                    "it (MAVias-PoE-CF); 1: one g fitted on every image",
    )

    @field_validator("bias_path", mode="before")
    @classmethod
    def _earlier_name(cls, value: object) -> object:
        return "experts" if value == "separate" else value  # what configs written before the rename call it

    @model_validator(mode="after")
    def _folds_need_experts(self) -> MaviasConfig:
        if self.bias_folds > 1 and self.bias_path != "experts":
            raise ValueError("mavias.bias_folds cross-fits the experts bias path; set mavias.bias_path experts or "
                             "mavias.bias_folds 1")
        return self


WARM_METHODS = ("erm", "mavias", "groupdro", "sd")  # no twin network that init_from would leave cold
BIAS_PATH_NAMES = {"joint": "MAVias", "experts": "MAVias-PoE"}  # joint: as published; experts: a product of experts


def method_name(cfg: TrainConfig) -> str:
    """The method as the benches, the report and the model card name it (MAVias's bias path included)."""
    if cfg.method != "mavias":
        return cfg.method
    return BIAS_PATH_NAMES[cfg.mavias.bias_path] + ("-CF" if cfg.mavias.bias_folds > 1 else "")


class GroupDROConfig(_Strict):
    eta: float = Field(0.01, gt=0, description="step size of the exponentiated-gradient update of group weights")


class JTTConfig(_Strict):
    """General defaults; the Waterbirds / CelebA presets carry the JTT paper's T=60, up=100 / T=1, up=50."""

    id_epochs: int = Field(2, ge=1, description="epochs of the ERM identification model (stage 1)")
    upweight: float = Field(20.0, ge=1, description="sampling weight of stage-1 errors in stage 2")


class LfFConfig(_Strict):
    q: float = Field(0.7, gt=0, le=1, description="generalised cross-entropy exponent of the biased model (paper 0.7)")
    ema: float = Field(0.7, ge=0, lt=1, description="EMA decay of the per-sample losses behind the relative difficulty")


class SDConfig(_Strict):
    coefficient: float = Field(0.1, gt=0, description="lambda of the spectral-decoupling penalty lambda z_y^2")


class FLACConfig(_Strict):
    """FLAC-B at the MAVias paper's setting (alpha 110) and the reference implementation's kernel exponent (d 1.0);
    the bias-capturing classifier is the trained ERM reference (``--reference``)."""

    alpha: float = Field(110.0, gt=0, description="weight of the FLAC divergence")
    d: float = Field(1.0, gt=0, description="kernel exponent: similarity 1 / (1 + distance^d)")


Selection = Literal["val_acc", "val_tag_wg", "val_robust", "val_true_wg"]


class TrainConfig(_Strict):
    method: Literal["erm", "mavias", "groupdro", "jtt", "lff", "sd", "flac", "debian"] = "mavias"
    backbone: BackboneConfig = BackboneConfig()
    optim: OptimConfig = OptimConfig()
    mavias: MaviasConfig = MaviasConfig()
    groupdro: GroupDROConfig = GroupDROConfig()
    jtt: JTTConfig = JTTConfig()
    lff: LfFConfig = LfFConfig()
    sd: SDConfig = SDConfig()
    flac: FLACConfig = FLACConfig()
    epochs: int | None = Field(None, ge=1, description="unset: scaled to the training set size (recipe)")
    length_factor: float | None = Field(None, gt=0, description="with epochs unset: the run's length as a multiple "
                                        "of the recipe's steps; unset: the method's own (1 for ERM, the audit's "
                                        "reference; 3 for every debiasing method)")
    init_from: str | None = Field(None, description="a checkpoint of a model of the same backbone and classes whose "
                                  "main-model weights start the training (a warm start); unset: the backbone's own "
                                  "initialisation")
    length_share: float | None = Field(None, gt=0, le=1, description="with epochs unset: train this share of the "
                                       "recipe's epochs (a warm start's); unset: all of them")
    validate_every: int | None = Field(None, ge=1, description="epochs between validations (and always after the last "
                                       "epoch); unset: the recipe's, about every VALIDATION_STEPS steps, or every "
                                       "epoch for a config trained as written")
    patience: int | None = Field(None, ge=0, description="stop after this many validations without a better "
                                 "selection score (once half the epochs are done); 0: never stop early; unset: the "
                                 "recipe's")
    batch_size: int = Field(64, ge=1)
    image_size: int | None = Field(None, ge=8, le=MAX_IMAGE_SIZE,
                                   description="unset: the training images' median shorter side, at most 224")
    encoder: str = Field(MINILM, description=f"text encoder of the bias embeddings: {SPEC_FORMS}")
    preprocessing: PreprocessConfig = PreprocessConfig()
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="mixed precision (bfloat16 autocast) where the device computes bfloat16 "
                      "natively: CUDA, or a CPU with AVX512-BF16 or AMX")
    selection: Selection = Field(
        "val_robust",
        description="model selection: val_acc (the paper's, and its presets': overall accuracy, no bias information), "
        "val_tag_wg (worst tag-derived validation group) or val_robust (default: balanced accuracy + shrunk tag-group "
        "accuracies from the label-free B', mavias.core.train.selection), all three always saved; or "
        "val_true_wg, the worst true group, for the oracle alone (it needs group attributes; GroupDRO's paper)",
    )
    num_workers: int | Literal["auto"] = Field(
        "auto", description="DataLoader workers; auto: 0 on CPU or for in-memory splits, else min(8, CPU cores)"
    )
    channels_last: bool = Field(True, description="channels_last memory format for image models")
    compile: bool = Field(False, description="torch.compile the backbone (pays on GPU for long runs; needs a compiler)")

    @field_validator("num_workers", mode="before")
    @classmethod
    def _workers(cls, value: object) -> object:
        if value == "auto" or (isinstance(value, int | str) and str(value).isdigit()):
            return value
        raise ValueError("num_workers takes auto or a whole number >= 0")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.backbone.name == "mlp" and self.backbone.weights:
            raise ValueError("backbone.weights applies to torchvision backbones only")
        parse_encoder_spec(self.encoder)
        if self.init_from and self.method not in WARM_METHODS:
            raise ValueError(f"init_from warm-starts the methods that train one network ({', '.join(WARM_METHODS)}); "
                             f"{self.method} trains more, which would start from the backbone's initialisation")
        size = self.image_size
        if self.preprocessing.resize is not None and size is not None and self.preprocessing.resize < size:
            raise ValueError(f"preprocessing.resize ({self.preprocessing.resize}) must be >= image_size ({size})")
        return self

    @property
    def is_complete(self) -> bool:
        """Every setting the recipe fills is set (a run's saved config always is)."""
        o = self.optim
        p = self.preprocessing
        image = () if self.backbone.name == "mlp" else (self.image_size, p.augment, p.flip)
        return None not in (o.name, o.lr, o.weight_decay, o.schedule, self.epochs, *image)


def load_config(path: str | Path | None = None, *, preset: str | None = None, overrides: dict | None = None) -> TrainConfig:
    """Merge preset < YAML file < overrides (dotted keys allowed) and validate."""
    data: dict = {}
    if preset:
        data = _deep_merge(data, _read_yaml(preset_path(preset)))
    if path:
        data = _deep_merge(data, _read_yaml(Path(path)))
    for key, value in (overrides or {}).items():
        data = _deep_merge(data, set_nested({}, key.split("."), value))  # a mapping value merges, as in a file
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            describe_validation_error(error, what="training config", model=TrainConfig)
            + "; fix the config file or the --set value"
        ) from None


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_path(name: str) -> Path:
    path = PRESET_DIR / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(preset_names())}")
    return path


def save_config(config: TrainConfig, path: str | Path, *, comments: list[str] = ()) -> Path:
    """The config as YAML; ``comments`` (e.g. why the recipe chose a value) become comment lines at its top."""
    header = "".join(f"# {line}\n" for line in comments)
    with atomic_path(path) as tmp:
        tmp.write_text(header + yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return Path(path)


def _read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"config {path} does not exist (or is not a file)")
    return read_yaml_mapping(path, what="config", error=ConfigError)


def _deep_merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
