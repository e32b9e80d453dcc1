"""Shape benchmarks: many classes, a colour or texture shortcut that only some classes carry, rare conflicts.

Each small image shows one filled shape (its class) on a textured background. For the first
``round(shortcut_fraction * n_classes)`` classes one attribute (the shape's colour for ``shape-colours``, the
background texture for ``shape-textures``) agrees with the class at ``bias_align`` in train and validation; the other
classes take that attribute uniformly at random, so the shortcut is partial and class-specific. Validation follows the
training distribution, so it holds only a handful of bias-conflicting images per shortcut class. The test split is
balanced over every (class, attribute value) cell. Tags name the shape, its parts, colour, texture and size, with
misses and spurious tags; the class word and its parts are the relevant tags (``relevance.parquet``), and
``attr_bias_aligned`` is "0" exactly for the bias-conflicting images of shortcut classes (true groups: label x it);
``benchmark.json`` lists the true shortcut tag of every shortcut class (to score biased-tag discovery).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mavias.core.manifest import ATTR_PREFIX, content_sample_id, save_manifest
from mavias.core.relevance import save_relevance
from mavias.core.synthetic._sampling import balanced_labels, stratified_flags
from mavias.core.synthetic.scene_drawing import (
    PIXEL_NOISE_STD,
    RGB,
    SUPERSAMPLE,
    VIRTUAL_SIZE,
    Pen,
    Placement,
    _arc_points,
    _jitter,
    encode_png,
)
from mavias.core.synthetic.synthetic_scenes import (
    INFO_NAME,
    MANIFEST_NAME,
    RELEVANCE_NAME,
    SPLIT_NUMBERS,
    TAGGING_SPLIT,
    emit_tags,
)
from mavias.utils.atomic import sync_all, write_bytes, write_json

Points = list[tuple[float, float]]


def _regular(n: int, start: float = -math.pi / 2, radius: float = 1.0) -> Points:
    return [(radius * math.cos(start + 2 * math.pi * i / n), radius * math.sin(start + 2 * math.pi * i / n))
            for i in range(n)]


def _star() -> Points:
    outer, inner = _regular(5), _regular(5, -math.pi / 2 + math.pi / 5, 0.42)
    return [p for pair in zip(outer, inner) for p in pair]


def _crescent() -> Points:
    outer = _arc_points(0, 0, 1, 1, math.pi / 2, 3 * math.pi / 2, 16)
    inner = _arc_points(0.35, 0, 0.65, 0.8, 3 * math.pi / 2, math.pi / 2, 16)
    return outer + inner


def _heart() -> Points:
    ts = np.linspace(0, 2 * math.pi, 32, endpoint=False)
    return [(float(np.sin(t) ** 3), float(-(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t)) / 16)) for t in ts]


# class -> (outline in the unit box, part words a tagger may name)
SHAPES: dict[str, tuple[Points, tuple[str, ...]]] = {
    "circle": (_arc_points(0, 0, 1, 1, 0, 2 * math.pi, 24), ("rim",)),
    "triangle": (_regular(3), ("corner", "apex")),
    "square": (_regular(4, math.pi / 4), ("corner", "edge")),
    "diamond": (_regular(4, 0, 1.05), ("corner", "tip")),
    "pentagon": (_regular(5), ("corner", "edge")),
    "star": (_star(), ("point", "spike")),
    "cross": ([(-0.3, -1), (0.3, -1), (0.3, -0.3), (1, -0.3), (1, 0.3), (0.3, 0.3), (0.3, 1), (-0.3, 1),
               (-0.3, 0.3), (-1, 0.3), (-1, -0.3), (-0.3, -0.3)], ("arm",)),
    "arrow": ([(-1, -0.3), (0.2, -0.3), (0.2, -0.8), (1, 0), (0.2, 0.8), (0.2, 0.3), (-1, 0.3)], ("arrowhead", "shaft")),
    "crescent": (_crescent(), ("horn", "curve")),
    "heart": (_heart(), ("lobe", "tip")),
    "trapezoid": ([(-1, 0.6), (-0.5, -0.6), (0.5, -0.6), (1, 0.6)], ("base", "edge")),
    "semicircle": (_arc_points(0, 0.4, 1, 1.2, math.pi, 2 * math.pi, 16), ("arc", "base")),
}
COLOURS: dict[str, RGB] = {
    "red": (210, 40, 40), "blue": (40, 70, 210), "yellow": (235, 215, 40), "green": (40, 150, 60),
    "purple": (130, 50, 170), "orange": (245, 140, 20), "cyan": (40, 200, 220), "magenta": (220, 50, 180),
    "brown": (120, 70, 30), "black": (25, 25, 25), "lime": (150, 230, 60), "pink": (250, 160, 190),
}


def _lines(pen: Pen, rng: np.random.Generator, ink: RGB, angle: float, spacing: float) -> None:
    dx, dy = math.cos(angle), math.sin(angle)
    offset = rng.uniform(0, spacing)
    for d in np.arange(-VIRTUAL_SIZE + offset, 2 * VIRTUAL_SIZE, spacing):
        cx, cy = VIRTUAL_SIZE / 2 - dy * (d - VIRTUAL_SIZE / 2), VIRTUAL_SIZE / 2 + dx * (d - VIRTUAL_SIZE / 2)
        pen.line([(cx - 2 * VIRTUAL_SIZE * dx, cy - 2 * VIRTUAL_SIZE * dy),
                  (cx + 2 * VIRTUAL_SIZE * dx, cy + 2 * VIRTUAL_SIZE * dy)], ink, 1.8)


def _dots(pen: Pen, rng: np.random.Generator, ink: RGB, spacing: float, radius: float) -> None:
    ox, oy = rng.uniform(0, spacing, 2)
    for x, y in itertools.product(np.arange(ox, VIRTUAL_SIZE, spacing), np.arange(oy, VIRTUAL_SIZE, spacing)):
        pen.ellipse(x, y, radius, radius, ink)


def _checks(pen: Pen, rng: np.random.Generator, ink: RGB, cell: float) -> None:
    ox, oy = rng.uniform(0, cell, 2)
    for i, j in itertools.product(range(-1, int(VIRTUAL_SIZE / cell) + 1), repeat=2):
        if (i + j) % 2 == 0:
            pen.rect(ox + i * cell, oy + j * cell, ox + (i + 1) * cell, oy + (j + 1) * cell, ink)


def _waves(pen: Pen, rng: np.random.Generator, ink: RGB, spacing: float) -> None:
    phase = rng.uniform(0, 2 * math.pi)
    xs = np.linspace(0, VIRTUAL_SIZE, 33)
    for y in np.arange(rng.uniform(0, spacing), VIRTUAL_SIZE, spacing):
        pen.line([(x, y + 2.5 * math.sin(x / 4 + phase)) for x in xs], ink, 1.6)


def _zigzag(pen: Pen, rng: np.random.Generator, ink: RGB, spacing: float = 9) -> None:
    xs = np.arange(0, VIRTUAL_SIZE + 4, 4)
    for y in np.arange(rng.uniform(0, spacing), VIRTUAL_SIZE, spacing):
        pen.line([(x, y + (3 if k % 2 else -3)) for k, x in enumerate(xs)], ink, 1.6)


def _speckle(pen: Pen, rng: np.random.Generator, ink: RGB) -> None:
    for x, y in rng.uniform(0, VIRTUAL_SIZE, (120, 2)):
        pen.ellipse(x, y, 0.9, 0.9, ink)


def _bricks(pen: Pen, rng: np.random.Generator, ink: RGB) -> None:
    for row, y in enumerate(np.arange(rng.uniform(0, 8), VIRTUAL_SIZE, 8)):
        pen.line([(0, y), (VIRTUAL_SIZE, y)], ink, 1.2)
        for x in np.arange(8 * (row % 2), VIRTUAL_SIZE, 16):
            pen.line([(x, y), (x, y + 8)], ink, 1.2)


TextureDrawer = Callable[[Pen, np.random.Generator, RGB], None]
TEXTURES: dict[str, TextureDrawer] = {
    "stripes": lambda pen, rng, ink: _lines(pen, rng, ink, 0.0, 7),
    "bars": lambda pen, rng, ink: _lines(pen, rng, ink, math.pi / 2, 7),
    "diagonal": lambda pen, rng, ink: _lines(pen, rng, ink, math.pi / 4, 8),
    "dots": lambda pen, rng, ink: _dots(pen, rng, ink, 9, 2.2),
    "checks": lambda pen, rng, ink: _checks(pen, rng, ink, 10),
    "grid": lambda pen, rng, ink: (_lines(pen, rng, ink, 0.0, 10), _lines(pen, rng, ink, math.pi / 2, 10)),
    "waves": lambda pen, rng, ink: _waves(pen, rng, ink, 9),
    "zigzag": _zigzag,
    "plain": lambda pen, rng, ink: None,
    "speckle": _speckle,
    "bricks": _bricks,
    "polka": lambda pen, rng, ink: _dots(pen, rng, ink, 16, 4.5),
}
SIZES = {"small": 14.0, "large": 20.0}  # half-width on the 64-px virtual canvas
Shortcut = Literal["colour", "texture"]


class ShapesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    shortcut: Shortcut = Field("colour", description="the attribute that carries the shortcut: colour or texture")
    n_classes: int = Field(10, ge=3, le=len(SHAPES))
    shortcut_fraction: float = Field(0.5, gt=0.0, le=1.0, description="share of classes that carry the shortcut")
    bias_align: float = Field(0.95, ge=0.0, le=1.0, description="P(attribute aligned) for shortcut classes, train/val")
    n_train: int = Field(6000, ge=1)
    n_val: int = Field(1000, ge=1)
    n_test_per_cell: int = Field(5, ge=1, description="test images per (class, attribute value) cell")
    image_size: int = Field(32, ge=16, le=256)
    tag_miss_rate: float = Field(0.1, ge=0.0, lt=1.0)
    spurious_tags_per_image: float = Field(0.3, ge=0.0)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _enough_values(self) -> ShapesConfig:
        if self.n_classes > min(len(COLOURS), len(TEXTURES)):
            raise ValueError(f"at most {min(len(COLOURS), len(TEXTURES))} classes")
        return self

    @property
    def classes(self) -> list[str]:
        return list(SHAPES)[: self.n_classes]

    @property
    def values(self) -> list[str]:
        """The shortcut attribute's values; value i is aligned with class i."""
        return list(COLOURS if self.shortcut == "colour" else TEXTURES)[: self.n_classes]

    @property
    def shortcut_classes(self) -> list[str]:
        return self.classes[: max(1, round(self.shortcut_fraction * self.n_classes))]


class ShapeTexturesConfig(ShapesConfig):
    """``shape-textures``: 12 classes, a background-texture shortcut in a third of them."""

    shortcut: Shortcut = "texture"
    n_classes: int = Field(12, ge=3, le=len(SHAPES))
    shortcut_fraction: float = Field(1 / 3, gt=0.0, le=1.0)
    n_test_per_cell: int = Field(4, ge=1)


def true_shortcut_tags(cfg: ShapesConfig) -> dict[str, str]:
    """class -> the tag of its aligned attribute value, for the shortcut classes only."""
    return {name: cfg.values[i] for i, name in enumerate(cfg.shortcut_classes)}


def vocabulary(cfg: ShapesConfig) -> list[str]:
    words = set(cfg.classes) | set(SIZES) | set(COLOURS) | set(TEXTURES)
    return sorted(words | {part for name in cfg.classes for part in SHAPES[name][1]})


def ground_truth_relevance(cfg: ShapesConfig) -> pd.DataFrame:
    rows = [(name, tag, tag == name or tag in SHAPES[name][1]) for name in cfg.classes for tag in vocabulary(cfg)]
    return pd.DataFrame(rows, columns=["class", "tag", "relevant"]).assign(source="ground_truth")


def _plan(split: str, cfg: ShapesConfig) -> pd.DataFrame:
    """label, shortcut value index and nuisance value index of every image of the split."""
    rng = np.random.default_rng([cfg.seed, SPLIT_NUMBERS[split], 11])
    k = cfg.n_classes
    if split == "test":
        cells = np.array(list(itertools.product(range(k), range(k)))).repeat(cfg.n_test_per_cell, axis=0)
        labels, values = cells[:, 0], cells[:, 1]
    else:
        labels = balanced_labels(cfg.n_train if split == "train" else cfg.n_val, k, rng)
        other = (labels + rng.integers(1, k, size=len(labels))) % k
        aligned = stratified_flags(labels, cfg.bias_align, rng) & (labels < len(cfg.shortcut_classes))
        random_value = rng.integers(0, k, size=len(labels))
        values = np.where(labels < len(cfg.shortcut_classes), np.where(aligned, labels, other), random_value)
    nuisance = rng.integers(0, k, size=len(labels))
    return pd.DataFrame({"label": labels, "value": values, "nuisance": nuisance,
                         "size": rng.choice(list(SIZES), size=len(labels))})


def render_shape(shape: str, colour: RGB, texture: str, half: float, image_size: int, seed: list[int]) -> Image.Image:
    rng = np.random.default_rng(seed)
    canvas_size = image_size * SUPERSAMPLE
    canvas = Image.new("RGB", (canvas_size, canvas_size), _jitter((215, 215, 205), rng, 20))
    pen = Pen(ImageDraw.Draw(canvas), canvas_size / VIRTUAL_SIZE)
    TEXTURES[texture](pen, rng, _jitter((120, 120, 125), rng, 25))
    half += rng.uniform(-2, 2)
    centre = rng.uniform(half + 2, VIRTUAL_SIZE - half - 2, 2)
    placement = Placement(float(centre[0]), float(centre[1]), half, math.radians(rng.uniform(-20, 20)))
    pen.at(placement).polygon(SHAPES[shape][0], _jitter(colour, rng, 15), outline=True)
    pixels = np.asarray(canvas.resize((image_size, image_size), Image.Resampling.BOX), dtype=np.float32)
    pixels = pixels + rng.normal(0, PIXEL_NOISE_STD, pixels.shape)
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))


def tagging_samples(cfg: ShapesConfig, n: int, seed: int) -> tuple[list[Image.Image], list[tuple[str, ...]]]:
    """``n`` images for training or scoring a tagger, every attribute drawn independently of the class, with the tags
    of everything they show."""
    rng = np.random.default_rng([cfg.seed, TAGGING_SPLIT, seed])
    colours, textures = list(COLOURS)[: cfg.n_classes], list(TEXTURES)[: cfg.n_classes]
    images, tags = [], []
    for index in range(n):
        name, colour, texture, size = (str(rng.choice(values)) for values in (cfg.classes, colours, textures,
                                                                              list(SIZES)))
        images.append(render_shape(name, COLOURS[colour], texture, SIZES[size], cfg.image_size,
                                   [cfg.seed, TAGGING_SPLIT, seed, index]))
        tags.append((name, *SHAPES[name][1], colour, texture, size))
    return images, tags


def _rows(out_dir: Path, split: str, cfg: ShapesConfig, tag_rng: np.random.Generator) -> list[dict]:
    words = vocabulary(cfg)
    colours, textures = list(COLOURS)[: cfg.n_classes], list(TEXTURES)[: cfg.n_classes]
    shortcut = set(cfg.shortcut_classes)
    rows = []
    for index, plan in _plan(split, cfg).iterrows():
        name = cfg.classes[plan["label"]]
        colour, texture = (colours[plan["value"]], textures[plan["nuisance"]]) if cfg.shortcut == "colour" \
            else (colours[plan["nuisance"]], textures[plan["value"]])
        image = render_shape(name, COLOURS[colour], texture, SIZES[plan["size"]], cfg.image_size,
                             [cfg.seed, SPLIT_NUMBERS[split], int(index)])
        png = encode_png(image)
        uri = f"images/{split}/{index:06d}.png"
        write_bytes(out_dir / uri, png, sync=False)
        true_tags = (name, *SHAPES[name][1], colour, texture, plan["size"])
        rows.append({
            "sample_id": content_sample_id(png), "uri": uri, "label": name, "split": split,
            "tags": emit_tags(true_tags, words, cfg, tag_rng),
            f"{ATTR_PREFIX}colour": colour, f"{ATTR_PREFIX}texture": texture,
            f"{ATTR_PREFIX}bias_aligned": "0" if name in shortcut and plan["value"] != plan["label"] else "1",
        })
    return rows


def make_shapes(out_dir: str | Path, cfg: ShapesConfig | None = None) -> Path:
    """Write images, ``relevance.parquet``, ``benchmark.json`` and (last) the manifest; return its path."""
    cfg = cfg or ShapesConfig()
    out_dir = Path(out_dir)
    manifest_path = out_dir / MANIFEST_NAME
    manifest_path.unlink(missing_ok=True)
    tag_rng = np.random.default_rng([cfg.seed, len(SPLIT_NUMBERS), 11])
    manifest = pd.DataFrame([row for split in SPLIT_NUMBERS for row in _rows(out_dir, split, cfg, tag_rng)])
    save_relevance(ground_truth_relevance(cfg), out_dir / RELEVANCE_NAME)
    cells = manifest.groupby(["split", "label", f"{ATTR_PREFIX}bias_aligned"]).size()
    counts = {split: {f"{label}/{aligned}": int(n) for (_, label, aligned), n in part.items()}
              for split, part in cells.groupby(level=0)}
    write_json(out_dir / INFO_NAME, {
        "benchmark": f"shape-{cfg.shortcut}s", "config": cfg.model_dump(mode="json"), "classes": cfg.classes,
        "shortcut_tags": true_shortcut_tags(cfg), "vocabulary": vocabulary(cfg),
        "group_key": f"label/{ATTR_PREFIX}bias_aligned", "counts": counts,
    })
    sync_all()  # the images, before the manifest that points at them
    return save_manifest(manifest, manifest_path)
