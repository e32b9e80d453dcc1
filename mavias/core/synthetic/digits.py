"""``digit-backgrounds``: ten digit classes whose background colour is a shortcut in every class (Biased-MNIST-like).

Each small image shows one printed digit (one of several bundled fonts, rotated, scaled and moved at random, light
ink with a dark outline) on a plain background. In train and validation the background takes the colour aligned with
the digit with probability ``bias_align`` and another colour otherwise; the test split is balanced over every
(digit, colour) cell. Tags name the digit, the numeral, the background colour, the font style and the size, with
misses and spurious tags; the digit word and "numeral" are the relevant tags (``relevance.parquet``).
``attr_bias_aligned`` is "0" exactly for the bias-conflicting images; ``benchmark.json`` lists every class's true
shortcut tag.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont
from pydantic import BaseModel, ConfigDict, Field

from mavias.core.manifest import ATTR_PREFIX, content_sample_id, save_manifest
from mavias.core.relevance import save_relevance
from mavias.core.synthetic._sampling import balanced_labels, stratified_flags
from mavias.core.synthetic.scene_drawing import PIXEL_NOISE_STD, SUPERSAMPLE, _jitter, encode_png
from mavias.core.synthetic.shapes import COLOURS
from mavias.core.synthetic.synthetic_scenes import (
    INFO_NAME,
    MANIFEST_NAME,
    RELEVANCE_NAME,
    SPLIT_NUMBERS,
    TAGGING_SPLIT,
    emit_tags,
)
from mavias.utils.atomic import sync_all, write_bytes, write_json

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
BACKGROUNDS = ("red", "blue", "yellow", "green", "purple", "orange", "cyan", "magenta", "brown", "black")
# font file (matplotlib's bundled fonts, so no system font is needed) -> the style word a tagger would use
FONTS = {"DejaVuSans.ttf": "sans", "DejaVuSans-Bold.ttf": "bold", "DejaVuSerif.ttf": "serif",
         "DejaVuSansMono.ttf": "monospace", "DejaVuSans-Oblique.ttf": "italic", "cmr10.ttf": "roman"}
SIZES = {"small": 0.55, "large": 0.8}  # glyph height as a share of the image
RELEVANT_PART = "numeral"


class DigitsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bias_align: float = Field(0.95, ge=0.0, le=1.0, description="P(background colour aligned with the digit), train/val")
    n_train: int = Field(6000, ge=1)
    n_val: int = Field(1000, ge=1)
    n_test_per_cell: int = Field(5, ge=1, description="test images per (digit, background colour) cell")
    image_size: int = Field(28, ge=16, le=256)
    tag_miss_rate: float = Field(0.1, ge=0.0, lt=1.0)
    spurious_tags_per_image: float = Field(0.3, ge=0.0)
    seed: int = Field(0, ge=0)


def vocabulary() -> list[str]:
    return sorted({*DIGITS, RELEVANT_PART, *BACKGROUNDS, *FONTS.values(), *SIZES})


def ground_truth_relevance() -> pd.DataFrame:
    rows = [(digit, tag, tag in (digit, RELEVANT_PART)) for digit in DIGITS for tag in vocabulary()]
    return pd.DataFrame(rows, columns=["class", "tag", "relevant"]).assign(source="ground_truth")


def _plan(split: str, cfg: DigitsConfig) -> pd.DataFrame:
    """Digit, background colour, font and size of every image of the split."""
    rng = np.random.default_rng([cfg.seed, SPLIT_NUMBERS[split], 13])
    k = len(DIGITS)
    if split == "test":
        cells = np.array(list(itertools.product(range(k), range(k)))).repeat(cfg.n_test_per_cell, axis=0)
        labels, colours = cells[:, 0], cells[:, 1]
    else:
        labels = balanced_labels(cfg.n_train if split == "train" else cfg.n_val, k, rng)
        other = (labels + rng.integers(1, k, size=len(labels))) % k
        colours = np.where(stratified_flags(labels, cfg.bias_align, rng), labels, other)
    return pd.DataFrame({"label": labels, "colour": colours, "font": rng.choice(list(FONTS), size=len(labels)),
                         "size": rng.choice(list(SIZES), size=len(labels))})


@functools.cache
def _font(name: str, pixels: int) -> ImageFont.FreeTypeFont:
    import matplotlib

    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name), pixels)


def render_digit(digit: int, background: tuple[int, int, int], font: str, size: str, image_size: int,
                 seed: list[int]) -> Image.Image:
    rng = np.random.default_rng(seed)
    canvas = image_size * SUPERSAMPLE
    height = int(canvas * (SIZES[size] + rng.uniform(-0.06, 0.06)))
    glyph = Image.new("RGBA", (canvas, canvas), (0, 0, 0, 0))
    draw = ImageDraw.Draw(glyph)
    ink = _jitter((240, 240, 235), rng, 12)
    draw.text((canvas / 2, canvas / 2), str(digit), font=_font(font, height), fill=ink, anchor="mm",
              stroke_width=max(1, canvas // 40), stroke_fill=(15, 15, 15))
    glyph = glyph.rotate(rng.uniform(-15, 15), resample=Image.Resampling.BICUBIC,
                         translate=tuple(rng.uniform(-0.12, 0.12, 2) * canvas))
    image = Image.new("RGBA", (canvas, canvas), _jitter(background, rng, 18) + (255,))
    image.alpha_composite(glyph)
    pixels = np.asarray(image.convert("RGB").resize((image_size, image_size), Image.Resampling.BOX), dtype=np.float32)
    pixels = pixels + rng.normal(0, PIXEL_NOISE_STD, pixels.shape)
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))


def tagging_samples(cfg: DigitsConfig, n: int, seed: int) -> tuple[list[Image.Image], list[tuple[str, ...]]]:
    """``n`` images for training or scoring a tagger, every attribute drawn independently of the digit, with the
    tags of everything they show."""
    rng = np.random.default_rng([cfg.seed, TAGGING_SPLIT, seed])
    images, tags = [], []
    for index in range(n):
        digit, colour = int(rng.integers(len(DIGITS))), str(rng.choice(BACKGROUNDS))
        font, size = str(rng.choice(list(FONTS))), str(rng.choice(list(SIZES)))
        images.append(render_digit(digit, COLOURS[colour], font, size, cfg.image_size,
                                   [cfg.seed, TAGGING_SPLIT, seed, index]))
        tags.append((DIGITS[digit], RELEVANT_PART, colour, FONTS[font], size))
    return images, tags


def _rows(out_dir: Path, split: str, cfg: DigitsConfig, tag_rng: np.random.Generator) -> list[dict]:
    words = vocabulary()
    rows = []
    for index, plan in _plan(split, cfg).iterrows():
        digit, colour = DIGITS[plan["label"]], BACKGROUNDS[plan["colour"]]
        image = render_digit(int(plan["label"]), COLOURS[colour], plan["font"], plan["size"], cfg.image_size,
                             [cfg.seed, SPLIT_NUMBERS[split], int(index)])
        png = encode_png(image)
        uri = f"images/{split}/{index:06d}.png"
        write_bytes(out_dir / uri, png, sync=False)
        true_tags = (digit, RELEVANT_PART, colour, FONTS[plan["font"]], plan["size"])
        rows.append({
            "sample_id": content_sample_id(png), "uri": uri, "label": digit, "split": split,
            "tags": emit_tags(true_tags, words, cfg, tag_rng), f"{ATTR_PREFIX}background": colour,
            f"{ATTR_PREFIX}bias_aligned": "1" if plan["colour"] == plan["label"] else "0",
        })
    return rows


def make_digits(out_dir: str | Path, cfg: DigitsConfig | None = None) -> Path:
    """Write images, ``relevance.parquet``, ``benchmark.json`` and (last) the manifest; return its path."""
    cfg = cfg or DigitsConfig()
    out_dir = Path(out_dir)
    manifest_path = out_dir / MANIFEST_NAME
    manifest_path.unlink(missing_ok=True)
    tag_rng = np.random.default_rng([cfg.seed, len(SPLIT_NUMBERS), 13])
    manifest = pd.DataFrame([row for split in SPLIT_NUMBERS for row in _rows(out_dir, split, cfg, tag_rng)])
    save_relevance(ground_truth_relevance(), out_dir / RELEVANCE_NAME)
    write_json(out_dir / INFO_NAME, {
        "benchmark": "digit-backgrounds", "config": cfg.model_dump(mode="json"), "classes": list(DIGITS),
        "shortcut_tags": dict(zip(DIGITS, BACKGROUNDS)), "vocabulary": vocabulary(),
        "group_key": f"label/{ATTR_PREFIX}bias_aligned",
    })
    sync_all()  # the images, before the manifest that points at them
    return save_manifest(manifest, manifest_path)
