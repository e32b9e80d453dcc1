"""Default training recipes per backbone family, resolved against the data when training starts.

Every setting a user leaves unset comes from the recipe of the backbone's family; what was chosen and why is written
next to the run (``recipe.json``, and as comments at the top of its ``config.yaml``):

| family | optimiser | learning rate | weight decay | schedule | length | augmentation |
|---|---|---|---|---|---|---|
| from scratch | SGD, momentum 0.9 | lr range test | 5e-4 | warm-up + cosine | ~TARGET_STEPS steps | crop |
| pretrained CNN | SGD, momentum 0.9 | lr range test (≤ 0.1) | 1e-4 | warm-up + cosine | ~half as many | crop + flip |
| pretrained ViT | AdamW | lr range test (≤ 0.01) | 0.05 | warm-up + cosine | ~half as many | crop + flip |

MAVias trains three times the steps of its family's recipe: its main model learns from what the bias path leaves
unexplained, a small share of each epoch (BENCHMARKS.md, "MAVias and training length").

The image size, when unset, is the training images' median shorter side (at most 224), and 224 for pretrained
backbones, which were trained at that size.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch.utils.data import DataLoader, RandomSampler

from mavias.manifest import resolve_uri
from mavias.train.config import BackboneConfig, TrainConfig, save_config
from mavias.train.data import IndexedInputs, SplitData
from mavias.train.inference import resolve_device
from mavias.train.lr_range import RangeTest, range_test
from mavias.train.model import build_main_model
from mavias.train.optim import make_optimizer
from mavias.utils.atomic import write_json

log = logging.getLogger(__name__)

TARGET_STEPS = 3000
SIZE_SAMPLE = 256  # training images whose size is read (headers only) to choose the image size
MAX_IMAGE_SIZE = 224
PRETRAINED_SIZE = 224
RANGE_TEST_STEPS = 100
LENGTH_FACTORS = {"mavias": 3}  # of the recipe's steps, per method
RECIPE_FILE = "recipe.json"
_TRANSFORMERS = ("vit", "deit", "swin", "beit", "eva", "dinov2")


@dataclass(frozen=True)
class Recipe:
    family: str
    optimizer: str
    weight_decay: float
    lr_range: tuple[float, float]  # where the range test looks
    fallback_lr: float  # when the range test cannot tell
    augment: bool
    flip: bool
    target_steps: int
    epoch_bounds: tuple[int, int]


RECIPES = {
    "scratch": Recipe("from scratch", "sgd", 5e-4, (1e-5, 10.0), 0.05, True, False, TARGET_STEPS, (10, 100)),
    "pretrained_cnn": Recipe("pretrained CNN", "sgd", 1e-4, (1e-6, 0.1), 1e-3, True, True, TARGET_STEPS // 2, (5, 50)),
    "pretrained_vit": Recipe("pretrained ViT", "adamw", 0.05, (1e-7, 1e-2), 1e-4, True, True, TARGET_STEPS // 2,
                             (5, 50)),
}


def recipe_for(backbone: BackboneConfig) -> Recipe:
    if not (backbone.pretrained or backbone.weights):
        return RECIPES["scratch"]
    name = backbone.name.removeprefix("timm:").lower()
    return RECIPES["pretrained_vit" if name.startswith(_TRANSFORMERS) else "pretrained_cnn"]


def resolve_image_settings(cfg: TrainConfig, manifest: pd.DataFrame, manifest_dir: Path) -> tuple[TrainConfig, dict]:
    """Fill the image size and augmentation (needed before images are prepared); returns the config and the notes."""
    recipe, notes = recipe_for(cfg.backbone), {}
    size = cfg.image_size
    if size is None and recipe.family == "from scratch":
        side = median_shorter_side(manifest, manifest_dir)
        size = int(min(max(side, 16), MAX_IMAGE_SIZE))
        notes["image_size"] = f"the training images' median shorter side is {side} px (at most {MAX_IMAGE_SIZE})"
    elif size is None:
        size = PRETRAINED_SIZE
        notes["image_size"] = f"{recipe.family} backbones were trained at {PRETRAINED_SIZE} px"
    cfg, augment_notes = _augmentation(cfg.model_copy(update={"image_size": size}), recipe)
    return cfg, {**notes, **augment_notes}


def _augmentation(cfg: TrainConfig, recipe: Recipe) -> tuple[TrainConfig, dict]:
    preprocessing, notes = cfg.preprocessing, {}
    for key, value in (("augment", recipe.augment), ("flip", recipe.flip)):
        if getattr(preprocessing, key) is None:
            preprocessing = preprocessing.model_copy(update={key: value})
            notes[f"preprocessing.{key}"] = f"the {recipe.family} recipe's ({'on' if value else 'off'})"
    return cfg.model_copy(update={"preprocessing": preprocessing}), notes


def median_shorter_side(manifest: pd.DataFrame, manifest_dir: Path) -> int:
    train = manifest[manifest["split"] == "train"]
    sample = train.sample(min(SIZE_SAMPLE, len(train)), random_state=0) if len(train) else train
    sides = []
    for uri in sample["uri"]:
        try:
            with Image.open(resolve_uri(manifest_dir, uri)) as image:  # reads the header only
                sides.append(min(image.size))
        except OSError:
            continue  # an unreadable image is quarantined later; it does not choose the size
    if not sides:
        raise ValueError("no readable training image to take the image size from; set image_size")
    return int(np.median(sides))


@dataclass
class Resolved:
    """A run's resolved config, what the recipe chose and why, and the range test behind the learning rate."""

    config: TrainConfig
    notes: dict[str, str]
    range_test: RangeTest | None = None
    requested: dict | None = None  # the config as given, before the recipe filled it

    def write(self, run_dir: Path) -> None:
        """``config.yaml`` (the choices as comments at its top) and ``recipe.json``."""
        header = [f"{key}: {why}" for key, why in self.notes.items()]
        save_config(self.config, run_dir / "config.yaml", comments=header)
        tested = None if self.range_test is None else self.range_test.__dict__
        write_json(run_dir / RECIPE_FILE, {"requested": self.requested, "resolved": self.config.model_dump(mode="json"),
                                           "family": recipe_for(self.config.backbone).family, "notes": self.notes,
                                           "lr_range_test": tested})


def resolve_config(cfg: TrainConfig, train: SplitData, n_classes: int, run_dir: Path,
                   device: torch.device | None = None) -> Resolved:
    """``cfg`` with every unset setting resolved for the run folder ``run_dir``: a folder that resolved the same
    request before keeps its choices (a resumed run trains on exactly what it started with)."""
    requested = cfg.model_dump(mode="json")
    if cfg.resolved:
        return Resolved(cfg, {}, None, requested)
    previous = _previous(run_dir, requested)
    if previous is not None:
        return previous
    notes = {}
    if train.is_image and not cfg.resolved:  # the image settings the split was prepared with
        if cfg.image_size is None:
            cfg, notes = cfg.model_copy(update={"image_size": train.image_size}), {
                "image_size": f"the size the training images were prepared at ({train.image_size} px)"}
        cfg, augment_notes = _augmentation(cfg, recipe_for(cfg.backbone))
        notes |= augment_notes
    device = device or resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    model = build_main_model(cfg.backbone, train.in_channels, n_classes).to(device)
    resolved = resolve_training(cfg, train, model, device)
    return Resolved(resolved.config, {**notes, **resolved.notes}, resolved.range_test, requested)


def _previous(run_dir: Path, requested: dict) -> Resolved | None:
    path = run_dir / RECIPE_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record.get("requested") != requested:
        return None
    tested = record.get("lr_range_test")
    return Resolved(TrainConfig.model_validate(record["resolved"]), record["notes"],
                    None if tested is None else RangeTest(**tested), requested)


def resolve_training(cfg: TrainConfig, train: SplitData, model: torch.nn.Module, device: torch.device) -> Resolved:
    """Fill the optimiser, schedule, epochs, batch size and learning rate of the backbone's recipe; ``model`` (its
    initial weights) is only copied, for the range test."""
    recipe, notes = recipe_for(cfg.backbone), {}
    optim, update = cfg.optim, {}
    if optim.name is None:
        optim = optim.model_copy(update={"name": recipe.optimizer})
        notes["optim.name"] = f"the {recipe.family} recipe's"
    if optim.weight_decay is None:
        optim = optim.model_copy(update={"weight_decay": recipe.weight_decay})
        notes["optim.weight_decay"] = f"the {recipe.family} recipe's"
    if optim.schedule is None:
        optim = optim.model_copy(update={"schedule": "cosine"})
        notes["optim.schedule"] = f"the {recipe.family} recipe's: linear warm-up, then cosine to 0"
    if cfg.batch_size > len(train) // 2:
        update["batch_size"] = max(2, len(train) // 2)
        notes["batch_size"] = (f"{cfg.batch_size} is more than half the {len(train)} training samples; "
                               f"{update['batch_size']} gives at least two steps an epoch")
    batch_size = update.get("batch_size", cfg.batch_size)
    if cfg.epochs is None:
        steps_per_epoch = max(1, len(train) // batch_size)
        low, high = recipe.epoch_bounds
        factor = LENGTH_FACTORS.get(cfg.method, 1)
        update["epochs"] = int(min(max(math.ceil(factor * recipe.target_steps / steps_per_epoch), low), high))
        notes["epochs"] = (f"about {factor * recipe.target_steps} steps of {batch_size} samples over {len(train)} "
                           f"training samples, within [{low}, {high}] epochs"
                           + (f" ({factor} x the {recipe.family} recipe's for {cfg.method})" if factor != 1 else ""))
    tested = None
    if optim.lr is None:
        lr, reason, tested = _find_lr(cfg, optim, recipe, train, model, device, batch_size)
        optim = optim.model_copy(update={"lr": lr})
        notes["optim.lr"] = reason
    resolved = cfg.model_copy(update={**update, "optim": optim})
    for key, why in notes.items():
        log.info("recipe: %s = %s (%s)", key, _value(resolved, key), why)
    return Resolved(resolved, notes, tested)


def _find_lr(cfg: TrainConfig, optim, recipe: Recipe, train: SplitData, model: torch.nn.Module,
             device: torch.device, batch_size: int) -> tuple[float, str, RangeTest]:
    optimizer = make_optimizer(optim.model_copy(update={"lr": recipe.lr_range[0]}),
                               [{"params": list(model.parameters())}])
    generator = torch.Generator().manual_seed(cfg.seed)
    loader = DataLoader(IndexedInputs(train.inputs), batch_size=batch_size,
                        sampler=RandomSampler(train.inputs, generator=generator), drop_last=len(train) > batch_size)
    tested = range_test(model, optimizer, loader, train, device, start=recipe.lr_range[0], end=recipe.lr_range[1],
                        steps=RANGE_TEST_STEPS)
    if tested.suggestion is None:
        reason = f"{tested.reason}; using the {recipe.family} recipe's fallback {recipe.fallback_lr:g}"
        log.warning("recipe: %s", reason)
        return recipe.fallback_lr, reason, tested
    return tested.suggestion, tested.reason, tested


def _value(cfg: TrainConfig, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node
