"""Default training recipes per backbone family, resolved against the data when training starts.

Every setting a user leaves unset comes from the recipe of the backbone's family; what was chosen and why is written
next to the run (``recipe.json``, and as comments at the top of its ``config.yaml``):

| family | optimiser | learning rate | weight decay | schedule | length | augmentation |
|---|---|---|---|---|---|---|
| from scratch | SGD, momentum 0.9 | lr range test | 5e-4 | warm-up + cosine | ~TARGET_STEPS steps | crop |
| pretrained CNN | SGD, momentum 0.9 | lr range test (≤ 0.1) | 1e-4 | warm-up + cosine | ~half as many | crop + flip |
| pretrained ViT | AdamW | lr range test (≤ 0.01) | 0.05 | warm-up + cosine | ~half as many | crop + flip |

Every debiasing method (MAVias and its peers) trains three times the steps of its family's recipe: MAVias's main
model learns from what the bias path leaves unexplained, a small share of each epoch (BENCHMARKS.md, "MAVias and
training length"), and every peer gains from the longer training too ("Equal compute again"). ERM keeps one: it is
the audit's reference, trained to show the shortcuts a plain model takes.

The image size, when unset, is the training images' median shorter side (at most 224), and 224 for pretrained
backbones, which were trained at that size.

Resolution is an explicit step before training, run where the training runs (it may build a model and run a range
test): ``recipe = resolve_recipe(cfg, data["train"], len(data.classes), run_dir=out)``, then ``Trainer(recipe, ...)``.
A run folder keeps its first resolution (a resumed run trains on exactly what it started with), and the range test is
cached per (training data, backbone, batch size, optimiser) in the user cache, so a night's reference and its MAVias
runs share one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch.utils.data import DataLoader, RandomSampler

from mavias.core.devices import choose_device
from mavias.core.manifest import resolve_uri
from mavias.core.train.config import BackboneConfig, OptimConfig, TrainConfig, save_config
from mavias.core.train.data import FeatureSplit, IndexedInputs, SplitData
from mavias.core.train.lr_range import RangeTest, from_curve, range_test
from mavias.core.train.model import build_main_model
from mavias.core.train.optim import make_optimizer
from mavias.core.train.recipe_file import RECIPE_FILE, read_recipe_record
from mavias.utils.atomic import write_json

log = logging.getLogger(__name__)

TARGET_STEPS = 3000
SIZE_SAMPLE = 256  # training images whose size is read (headers only) to choose the image size
MAX_IMAGE_SIZE = 224
PRETRAINED_SIZE = 224
RANGE_TEST_STEPS = 100
VALIDATION_STEPS = 50  # training steps between validations, at least: a small epoch is not validated every time
PATIENCE_SHARE = 0.3  # of a run's validations without a better selection score before it stops
RANGE_TEST_VERSION = 2  # of the range test and the augmentation it draws: a change must not reuse older curves
DEBIASING_LENGTH = 3  # of the recipe's steps: every debiasing method gains from it (BENCHMARKS.md "Equal compute again")
LENGTH_FACTORS = {"erm": 1}  # ERM is the audit's reference: its length is the audit's, whose B' rests on it
METHOD_WEIGHT_DECAY = {"sd": 0.0}  # spectral decoupling is its own penalty: its reference implementation trains without
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


def choose_image_settings(cfg: TrainConfig, manifest: pd.DataFrame, manifest_dir: Path) -> tuple[TrainConfig, dict]:
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
class ResolvedRecipe:
    """A run's complete config, what the recipe chose and why, and the range test behind the learning rate."""

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

    @classmethod
    def read(cls, run_dir: Path, requested: dict | None = None) -> ResolvedRecipe | None:
        """The resolution a run folder recorded (for ``requested``, when given), or None."""
        record = read_recipe_record(run_dir, requested)
        if record is None:
            return None
        tested = record.get("lr_range_test")
        return cls(TrainConfig.model_validate(record["resolved"]), record["notes"],
                   None if tested is None else RangeTest(**tested), record.get("requested"))


def as_recipe(settings: ResolvedRecipe | TrainConfig) -> ResolvedRecipe:
    """A complete config as a resolution with nothing chosen (trained as written: without a cadence or patience of
    its own, validated every epoch and never stopped early); an incomplete one must be resolved first."""
    if isinstance(settings, ResolvedRecipe):
        return settings
    if not settings.is_complete:
        raise ValueError("the training config has settings left to the recipe: resolve_recipe(cfg, train, n_classes) "
                         "first, where the training runs")
    return ResolvedRecipe(settings, {}, None, settings.model_dump(mode="json"))


def resolve_recipe(cfg: TrainConfig, train: SplitData, n_classes: int, *, run_dir: Path | None = None,
                   device: torch.device | None = None) -> ResolvedRecipe:
    """``cfg`` with every unset setting chosen by its backbone family's recipe for this training split; a
    ``run_dir`` that resolved the same request before keeps its choices."""
    requested = cfg.model_dump(mode="json")
    if cfg.is_complete and None not in (cfg.validate_every, cfg.patience):
        return ResolvedRecipe(cfg, {}, None, requested)
    previous = None if run_dir is None else ResolvedRecipe.read(run_dir, requested)
    if previous is not None:
        return previous
    notes = {}
    if train.is_image:  # the image settings the split was prepared with
        if cfg.image_size is None:
            cfg, notes = cfg.model_copy(update={"image_size": train.image_size}), {
                "image_size": f"the size the training images were prepared at ({train.image_size} px)"}
        cfg, augment_notes = _augmentation(cfg, recipe_for(cfg.backbone))
        notes |= augment_notes
    chosen = choose_training_settings(cfg, train, n_classes, device or choose_device(cfg.device))
    return ResolvedRecipe(chosen.config, {**notes, **chosen.notes}, chosen.range_test, requested)


def choose_training_settings(cfg: TrainConfig, train: SplitData, n_classes: int,
                             device: torch.device) -> ResolvedRecipe:
    """Fill the optimiser, schedule, length, validation cadence, patience and learning rate of the recipe."""
    recipe = recipe_for(cfg.backbone)
    optim, notes = _optimiser(cfg, recipe)
    update, length_notes = _length(cfg, recipe, len(train))
    notes |= length_notes
    tested = None
    if optim.lr is None:
        lr, reason, tested = _find_lr(cfg.model_copy(update={**update, "optim": optim}), recipe, train, n_classes,
                                      device)
        optim = optim.model_copy(update={"lr": lr})
        notes["optim.lr"] = reason
    resolved = cfg.model_copy(update={**update, "optim": optim})
    for key, why in notes.items():
        log.info("recipe: %s = %s (%s)", key, _value(resolved, key), why)
    return ResolvedRecipe(resolved, notes, tested)


def _optimiser(cfg: TrainConfig, recipe: Recipe) -> tuple[OptimConfig, dict[str, str]]:
    optim, notes = cfg.optim, {}
    if optim.name is None:
        optim = optim.model_copy(update={"name": recipe.optimizer})
        notes["optim.name"] = f"the {recipe.family} recipe's"
    if optim.weight_decay is None and cfg.method in METHOD_WEIGHT_DECAY:
        optim = optim.model_copy(update={"weight_decay": METHOD_WEIGHT_DECAY[cfg.method]})
        notes["optim.weight_decay"] = f"{cfg.method}'s own: its penalty replaces weight decay"
    elif optim.weight_decay is None:
        optim = optim.model_copy(update={"weight_decay": recipe.weight_decay})
        notes["optim.weight_decay"] = f"the {recipe.family} recipe's"
    if optim.schedule is None:
        optim = optim.model_copy(update={"schedule": "cosine"})
        notes["optim.schedule"] = f"the {recipe.family} recipe's: linear warm-up, then cosine to 0"
    return optim, notes


def _length(cfg: TrainConfig, recipe: Recipe, n_train: int) -> tuple[dict, dict[str, str]]:
    """The batch size, the epochs, the validation cadence and the patience of a training split of ``n_train``."""
    update, notes = {}, {}
    if cfg.batch_size > n_train // 2:
        update["batch_size"] = max(2, n_train // 2)
        notes["batch_size"] = (f"{cfg.batch_size} is more than half the {n_train} training samples; "
                               f"{update['batch_size']} gives at least two steps an epoch")
    batch_size = update.get("batch_size", cfg.batch_size)
    steps_per_epoch = max(1, n_train // batch_size)
    if cfg.epochs is None:
        low, high = recipe.epoch_bounds
        factor = cfg.length_factor or LENGTH_FACTORS.get(cfg.method, DEBIASING_LENGTH)
        update["epochs"] = int(min(max(math.ceil(factor * recipe.target_steps / steps_per_epoch), low), high))
        notes["epochs"] = (f"about {factor * recipe.target_steps} steps of {batch_size} samples over {n_train} "
                           f"training samples, within [{low}, {high}] epochs"
                           + (f" ({factor} x the {recipe.family} recipe's for {cfg.method})" if factor != 1 else ""))
        if cfg.length_share is not None:
            update["epochs"] = max(1, math.ceil(update["epochs"] * cfg.length_share))
            notes["epochs"] += f", x {cfg.length_share:.2f}: a warm start's share"
    epochs, validate_every = update.get("epochs", cfg.epochs), cfg.validate_every
    if validate_every is None:
        validate_every = update["validate_every"] = max(1, math.ceil(VALIDATION_STEPS / steps_per_epoch))
        notes["validate_every"] = f"about every {VALIDATION_STEPS} steps: epochs of {steps_per_epoch} steps"
    if cfg.patience is None:
        validations = math.ceil(epochs / validate_every)
        update["patience"] = max(3, math.ceil(PATIENCE_SHARE * validations))
        notes["patience"] = (f"{PATIENCE_SHARE:.0%} of the run's {validations} validations without a better selection "
                             "score stops it (never in its first half)")
    return update, notes


def range_test_cache() -> Path:
    """Where range tests are kept: ``$MAVIAS_CACHE_DIR/lr-range`` (default ``~/.cache/mavias/lr-range``)."""
    return Path(os.environ.get("MAVIAS_CACHE_DIR", Path.home() / ".cache" / "mavias")) / "lr-range"


def _range_test_key(cfg: TrainConfig, recipe: Recipe, train: SplitData, n_classes: int) -> str:
    """What a range test's outcome depends on: the training samples, the model, the batches and the optimiser."""
    key = {"version": RANGE_TEST_VERSION, "samples": _split_digest(train), "n_classes": n_classes,
           "image_size": train.image_size, "augmented": train.augmented, "in_channels": train.in_channels,
           "backbone": cfg.backbone.model_dump(mode="json"), "batch_size": cfg.batch_size, "seed": cfg.seed,
           "optim": cfg.optim.model_dump(mode="json", exclude={"lr"}), "range": recipe.lr_range,
           "steps": RANGE_TEST_STEPS}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def _split_digest(train: SplitData) -> str:
    """The training samples and labels: by content id where the split has them, else by the inputs themselves."""
    digest = hashlib.sha256(np.asarray(train.labels).tobytes())
    if "sample_id" in train.frame:
        digest.update("\n".join(map(str, train.frame["sample_id"])).encode())
    elif isinstance(train.inputs, FeatureSplit):
        digest.update(train.inputs.cache.numpy().tobytes())
    else:
        digest.update("\n".join(map(str, train.frame["uri"])).encode())
    return digest.hexdigest()


def _find_lr(cfg: TrainConfig, recipe: Recipe, train: SplitData, n_classes: int,
             device: torch.device) -> tuple[float, str, RangeTest]:
    cached = range_test_cache() / f"{_range_test_key(cfg, recipe, train, n_classes)}.json"
    if cached.is_file():
        curve = json.loads(cached.read_text())  # only the curve is kept: the suggestion is the current rule's
        tested = from_curve(curve["lrs"], curve["losses"], curve.get("steps", 0))
    else:
        tested = _range_test(cfg, recipe, train, n_classes, device)
        write_json(cached, {"lrs": tested.lrs, "losses": tested.losses, "steps": tested.steps})
    if tested.suggestion is None:
        reason = f"{tested.reason}; using the {recipe.family} recipe's fallback {recipe.fallback_lr:g}"
        log.warning("recipe: %s", reason)
        return recipe.fallback_lr, reason, tested
    return tested.suggestion, tested.reason, tested


def _range_test(cfg: TrainConfig, recipe: Recipe, train: SplitData, n_classes: int,
                device: torch.device) -> RangeTest:
    torch.manual_seed(cfg.seed)
    model = build_main_model(cfg.backbone, train.in_channels, n_classes).to(device)
    optimizer = make_optimizer(cfg.optim.model_copy(update={"lr": recipe.lr_range[0]}),
                               [{"params": list(model.parameters())}])
    generator = torch.Generator().manual_seed(cfg.seed)
    loader = DataLoader(IndexedInputs(train.inputs), batch_size=cfg.batch_size,
                        sampler=RandomSampler(train.inputs, generator=generator), drop_last=len(train) > cfg.batch_size)
    return range_test(model, optimizer, loader, train, device, start=recipe.lr_range[0], end=recipe.lr_range[1],
                      steps=RANGE_TEST_STEPS)


def _value(cfg: TrainConfig, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node
