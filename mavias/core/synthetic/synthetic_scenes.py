"""Synthetic scenes: an offline, UrbanCars-like benchmark with two visual shortcuts and noisy tagger output.

Each image shows a main object whose *shape* gives its class, on a background and next to a small co-occurring
object. In the training distribution the background and the co-object each agree with the class at a configured
rate (independently); the test split is balanced over every (class, background, co-object) combination, like
UrbanCars' test set. ``three-cue-scenes`` (:class:`ThreeCueScenesConfig`) adds a third shortcut, the object's
colour, on classes, backgrounds and co-objects ``synthetic-scenes`` does not use by default. Each image carries the tags an image tagger would emit (class word, visible parts, scene
words, colour, size, lighting; some missed, some spurious), and ``relevance.parquet`` holds the ground truth that
an LLM judge should reproduce: a tag is relevant to a class exactly when it is the class word or one of its parts.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, field_validator

from mavias.core.manifest import ATTR_PREFIX, MANIFEST_NAME, content_sample_id, save_manifest
from mavias.core.relevance import save_relevance
from mavias.core.synthetic._sampling import balanced_labels, stratified_flags
from mavias.core.synthetic.scene_drawing import RGB, SceneSpec, encode_png, render_scene
from mavias.utils.atomic import sync_all, write_bytes, write_json

RELEVANCE_NAME = "relevance.parquet"
INFO_NAME = "benchmark.json"
SPLIT_NUMBERS = {"train": 0, "val": 1, "test": 2}
TAGGING_SPLIT = 3  # the tagger's own images: a seed stream no benchmark split draws from
MAX_PART_TAGS = 3


@dataclass(frozen=True)
class SceneClass:
    parts: tuple[str, ...]  # meronyms drawn on the object, the words a tagger may name
    background: str  # the background aligned with this class
    coobject: str  # the co-occurring object aligned with this class
    color: str  # the object colour aligned with this class where colour is a shortcut (three-cue-scenes)


SCENE_CLASSES: dict[str, SceneClass] = {
    "car": SceneClass(("wheel", "windshield", "headlight"), "street", "traffic light", "red"),
    "bird": SceneClass(("beak", "wing", "tail", "eye"), "forest", "mushroom", "yellow"),
    "boat": SceneClass(("hull", "sail", "mast"), "sea", "lighthouse", "pink"),
    "airplane": SceneClass(("fuselage", "propeller", "cockpit"), "desert", "cactus", "white"),
    "fish": SceneClass(("fin", "gill", "scale"), "room", "lamp", "orange"),
    "house": SceneClass(("roof", "door", "chimney", "window"), "snow", "snowman", "purple"),
}
BACKGROUND_TAGS: dict[str, tuple[str, ...]] = {
    "street": ("street", "road", "asphalt"),
    "forest": ("forest", "tree", "foliage"),
    "sea": ("sea", "water", "wave"),
    "desert": ("desert", "sand", "dune"),
    "room": ("room", "floor", "wall"),
    "snow": ("snow", "winter", "ice"),
}
COOBJECT_TAGS: dict[str, tuple[str, ...]] = {
    "traffic light": ("traffic light",),
    "mushroom": ("mushroom",),
    "lighthouse": ("lighthouse", "tower"),
    "cactus": ("cactus",),
    "lamp": ("lamp", "lampshade"),
    "snowman": ("snowman",),
}
# Nuisance attributes, independent of everything else; each value is also the tag a tagger emits for it.
COLORS: dict[str, RGB] = {
    "red": (200, 40, 40),
    "orange": (240, 140, 30),
    "yellow": (235, 210, 40),
    "purple": (130, 60, 170),
    "pink": (235, 120, 170),
    "white": (240, 240, 240),
}
SIZES: dict[str, float] = {"small": 11.0, "medium": 14.0, "large": 17.0}  # object half-width, 64-px canvas
LIGHTING: dict[str, tuple[float, float, float]] = {"daylight": (1.0, 1.0, 1.0), "dusk": (0.85, 0.75, 0.72)}


class SyntheticScenesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    NAME: ClassVar[str] = "synthetic-scenes"

    n_train: int = Field(4000, ge=1)
    n_val: int = Field(1200, ge=1)
    n_test_per_cell: int = Field(40, ge=1, description="test images per (class, background, co-object) cell")
    image_size: int = Field(64, ge=32, le=512)
    classes: tuple[str, ...] = Field(("car", "bird", "boat"), description=f"K >= 3 of {sorted(SCENE_CLASSES)}")
    bg_align: float = Field(0.95, ge=0.0, le=1.0, description="P(background aligned with the class), train/val")
    coobj_align: float = Field(0.95, ge=0.0, le=1.0, description="P(co-object aligned with the class), train/val")
    tag_miss_rate: float = Field(0.1, ge=0.0, lt=1.0, description="P(a true tag is not emitted)")
    spurious_tags_per_image: float = Field(0.5, ge=0.0, description="Poisson mean of wrong tags per image")
    seed: int = Field(0, ge=0)

    @field_validator("classes")
    @classmethod
    def _known_distinct_classes(cls, classes: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(classes) - set(SCENE_CLASSES))
        if unknown:
            raise ValueError(f"unknown class(es) {unknown}; choose from {sorted(SCENE_CLASSES)}")
        if len(set(classes)) != len(classes) or len(classes) < 3:
            raise ValueError(f"need at least 3 distinct classes, got {list(classes)}")
        return classes

    @property
    def backgrounds(self) -> tuple[str, ...]:
        return tuple(SCENE_CLASSES[c].background for c in self.classes)

    @property
    def coobjects(self) -> tuple[str, ...]:
        return tuple(SCENE_CLASSES[c].coobject for c in self.classes)

    @property
    def colors(self) -> tuple[str, ...]:
        return tuple(SCENE_CLASSES[c].color for c in self.classes)

    @property
    def color_shortcut_rate(self) -> float | None:
        """P(object colour aligned with the class), train/val; None: the colour is drawn independently of the class."""
        return None


class ThreeCueScenesConfig(SyntheticScenesConfig):
    """Three shortcuts per class at once: background, co-object and the object's colour (its own classes)."""

    NAME: ClassVar[str] = "three-cue-scenes"
    n_test_per_cell: int = Field(20, ge=1, description="test images per (class, background, co-object, colour) cell")
    classes: tuple[str, ...] = Field(("airplane", "fish", "house"), description=f"K >= 3 of {sorted(SCENE_CLASSES)}")
    color_align: float = Field(0.9, ge=0.0, le=1.0, description="P(object colour aligned with the class), train/val")

    @property
    def color_shortcut_rate(self) -> float | None:
        return self.color_align


@dataclass(frozen=True)
class PlannedImage:
    split: str
    index: int
    label: str
    background: str
    coobject: str
    color: str
    size: str
    lighting: str
    visible_parts: tuple[str, ...]  # the parts a tagger names for this image

    @property
    def uri(self) -> str:
        return f"images/{self.split}/{self.index:06d}.png"

    @property
    def true_tags(self) -> tuple[str, ...]:
        return (
            (self.label, *self.visible_parts)
            + BACKGROUND_TAGS[self.background]
            + COOBJECT_TAGS[self.coobject]
            + (self.color, self.size, self.lighting)
        )

    def scene(self) -> SceneSpec:
        return SceneSpec(
            self.label, self.background, self.coobject, COLORS[self.color], SIZES[self.size], LIGHTING[self.lighting]
        )


def benchmark_vocabulary(classes: tuple[str, ...]) -> list[str]:
    """Every tag the benchmark can emit for these classes, sorted."""
    words = {*COLORS, *SIZES, *LIGHTING}
    for name in classes:
        scene_class = SCENE_CLASSES[name]
        words |= {name, *scene_class.parts, *BACKGROUND_TAGS[scene_class.background]}
        words |= set(COOBJECT_TAGS[scene_class.coobject])
    return sorted(words)


def ground_truth_relevance(classes: tuple[str, ...]) -> pd.DataFrame:
    """Relevance of every (class, tag) pair: the class word and its own parts are relevant, nothing else."""
    rows = [
        (name, tag, tag == name or tag in SCENE_CLASSES[name].parts)
        for name in sorted(classes)
        for tag in benchmark_vocabulary(classes)
    ]
    return pd.DataFrame(rows, columns=["class", "tag", "relevant"]).assign(source="ground_truth")


def emit_tags(
    true_tags: tuple[str, ...], vocabulary: list[str], cfg: SyntheticScenesConfig, rng: np.random.Generator
) -> list[str]:
    """What an imperfect tagger says: each true tag missed with ``tag_miss_rate``, plus Poisson spurious tags."""
    kept = [tag for tag in true_tags if rng.random() >= cfg.tag_miss_rate]
    absent = [tag for tag in vocabulary if tag not in true_tags]
    n_spurious = min(int(rng.poisson(cfg.spurious_tags_per_image)), len(absent))
    spurious = rng.choice(absent, size=n_spurious, replace=False).tolist() if n_spurious else []
    return sorted(set(kept) | set(spurious))


Groups = list[np.ndarray]  # class, background, co-object (and, where a shortcut, colour) index per image


def _shortcut_rates(cfg: SyntheticScenesConfig) -> list[float]:
    rates = [cfg.bg_align, cfg.coobj_align]
    return rates if cfg.color_shortcut_rate is None else [*rates, cfg.color_shortcut_rate]


def _training_groups(n: int, n_classes: int, cfg: SyntheticScenesConfig, rng: np.random.Generator) -> Groups:
    """(class, background, co-object[, colour]) indices of the biased training distribution."""
    labels = balanced_labels(n, n_classes, rng)

    def aligned_or_other(rate: float) -> np.ndarray:  # when not aligned: uniform over the other K-1 values
        other = (labels + rng.integers(1, n_classes, size=n)) % n_classes
        return np.where(stratified_flags(labels, rate, rng), labels, other)

    return [labels, *(aligned_or_other(rate) for rate in _shortcut_rates(cfg))]


def _test_groups(n_classes: int, cfg: SyntheticScenesConfig) -> Groups:
    """Every (class, background, co-object[, colour]) cell ``n_test_per_cell`` times."""
    cells = itertools.product(range(n_classes), repeat=1 + len(_shortcut_rates(cfg)))
    return list(np.array(list(cells)).repeat(cfg.n_test_per_cell, axis=0).T)


def plan_split(split: str, cfg: SyntheticScenesConfig) -> list[PlannedImage]:
    """Decide what every image of ``split`` shows (the drawing itself happens in :func:`render_scene`)."""
    rng = np.random.default_rng([cfg.seed, SPLIT_NUMBERS[split]])
    n_classes = len(cfg.classes)
    if split == "test":
        groups = _test_groups(n_classes, cfg)
    else:
        groups = _training_groups(cfg.n_train if split == "train" else cfg.n_val, n_classes, cfg, rng)
    plans = []
    for index, (label, background, coobject, *color) in enumerate(zip(*groups)):
        parts = SCENE_CLASSES[cfg.classes[label]].parts
        n_parts = int(rng.integers(1, min(MAX_PART_TAGS, len(parts)) + 1))
        drawn_color = str(rng.choice(list(COLORS)))  # drawn either way: synthetic-scenes keeps its random stream
        plans.append(
            PlannedImage(
                split=split,
                index=index,
                label=cfg.classes[label],
                background=cfg.backgrounds[background],
                coobject=cfg.coobjects[coobject],
                color=cfg.colors[color[0]] if color else drawn_color,
                size=str(rng.choice(list(SIZES))),
                lighting=str(rng.choice(list(LIGHTING))),
                visible_parts=tuple(sorted(str(p) for p in rng.choice(parts, size=n_parts, replace=False))),
            )
        )
    return plans


def tagging_samples(cfg: SyntheticScenesConfig, n: int, seed: int) -> tuple[list[Image.Image], list[tuple[str, ...]]]:
    """``n`` images for training or scoring a tagger, every attribute drawn independently of the class, with the tags
    of everything they show (all the object's parts: they are all drawn)."""
    rng = np.random.default_rng([cfg.seed, TAGGING_SPLIT, seed])
    images, tags = [], []
    for index in range(n):
        label, background, coobject = (str(rng.choice(values)) for values in (cfg.classes, cfg.backgrounds,
                                                                               cfg.coobjects))
        color, size, lighting = (str(rng.choice(list(values))) for values in (COLORS, SIZES, LIGHTING))
        spec = SceneSpec(label, background, coobject, COLORS[color], SIZES[size], LIGHTING[lighting])
        images.append(render_scene(spec, cfg.image_size, (cfg.seed, TAGGING_SPLIT, seed, index)))
        tags.append((label, *SCENE_CLASSES[label].parts, *BACKGROUND_TAGS[background], *COOBJECT_TAGS[coobject],
                     color, size, lighting))
    return images, tags


def _write_image(out_dir: Path, plan: PlannedImage, cfg: SyntheticScenesConfig) -> str:
    """Render, write atomically, return the sample id."""
    png = encode_png(render_scene(plan.scene(), cfg.image_size, (cfg.seed, SPLIT_NUMBERS[plan.split], plan.index)))
    write_bytes(out_dir / plan.uri, png, sync=False)
    return content_sample_id(png)


def _manifest_rows(out_dir: Path, plans: list[PlannedImage], cfg: SyntheticScenesConfig) -> list[dict]:
    vocabulary = benchmark_vocabulary(cfg.classes)
    tag_rng = np.random.default_rng([cfg.seed, len(SPLIT_NUMBERS)])
    return [
        {
            "sample_id": _write_image(out_dir, plan, cfg),
            "uri": plan.uri,
            "label": plan.label,
            "split": plan.split,
            "tags": emit_tags(plan.true_tags, vocabulary, cfg, tag_rng),
            f"{ATTR_PREFIX}background": plan.background,
            f"{ATTR_PREFIX}coobject": plan.coobject,
            f"{ATTR_PREFIX}bg_aligned": _flag(plan.background == SCENE_CLASSES[plan.label].background),
            f"{ATTR_PREFIX}coobj_aligned": _flag(plan.coobject == SCENE_CLASSES[plan.label].coobject),
            f"{ATTR_PREFIX}color": plan.color,
            f"{ATTR_PREFIX}size": plan.size,
            f"{ATTR_PREFIX}lighting": plan.lighting,
        } | ({} if cfg.color_shortcut_rate is None else
             {f"{ATTR_PREFIX}color_aligned": _flag(plan.color == SCENE_CLASSES[plan.label].color)})
        for plan in plans
    ]


def _flag(value: bool) -> str:
    return "1" if value else "0"


def _aligned_values(cfg: SyntheticScenesConfig, name: str) -> dict:
    """A class's parts and the values aligned with it (its colour only where colour is a shortcut)."""
    values = vars(SCENE_CLASSES[name])
    return values if cfg.color_shortcut_rate is not None else {k: v for k, v in values.items() if k != "color"}


def _benchmark_info(cfg: SyntheticScenesConfig, manifest: pd.DataFrame) -> dict:
    columns = ["label", f"{ATTR_PREFIX}background", f"{ATTR_PREFIX}coobject"]
    columns += [] if cfg.color_shortcut_rate is None else [f"{ATTR_PREFIX}color"]
    counts = {}
    for split, rows in manifest.groupby("split"):
        groups = Counter(zip(*(rows[column] for column in columns)))
        counts[split] = {"total": len(rows), "groups": {"/".join(key): n for key, n in sorted(groups.items())}}
    return {
        "benchmark": cfg.NAME,
        "config": cfg.model_dump(mode="json"),
        "classes": sorted(cfg.classes),
        "scene": {name: _aligned_values(cfg, name) for name in cfg.classes},
        "tags": {
            "background": {b: BACKGROUND_TAGS[b] for b in cfg.backgrounds},
            "coobject": {c: COOBJECT_TAGS[c] for c in cfg.coobjects},
            "color": list(COLORS),
            "size": list(SIZES),
            "lighting": list(LIGHTING),
        },
        "vocabulary": benchmark_vocabulary(cfg.classes),
        "group_key": "/".join(column.removeprefix(ATTR_PREFIX) for column in columns),
        "counts": counts,
    }


def make_synthetic_scenes(out_dir: str | Path, cfg: SyntheticScenesConfig | None = None) -> Path:
    """Write images, ``relevance.parquet``, ``benchmark.json`` and (last) the manifest; return its path."""
    cfg = cfg or SyntheticScenesConfig()
    out_dir = Path(out_dir)
    manifest_path = out_dir / MANIFEST_NAME
    manifest_path.unlink(missing_ok=True)  # while images are replaced, no manifest may point at them
    plans = [plan for split in SPLIT_NUMBERS for plan in plan_split(split, cfg)]
    manifest = pd.DataFrame(_manifest_rows(out_dir, plans, cfg))
    save_relevance(ground_truth_relevance(cfg.classes), out_dir / RELEVANCE_NAME)
    write_json(out_dir / INFO_NAME, _benchmark_info(cfg, manifest))
    sync_all()  # the images, before the manifest that points at them
    return save_manifest(manifest, manifest_path)
