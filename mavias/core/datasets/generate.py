"""Tiny generated trees in the published layouts (ImageFolder, Waterbirds) for tests and ``mavias bench data``, and
an ImageFolder with a planted colour shortcut and its tags sidecar (the audit's tests and benchmark)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

WATERBIRDS_HEADER = "img_id,img_filename,y,split,place,place_filename"


def write_image(path: Path, rng: np.random.Generator, size: int | tuple[int, int] = 16) -> Path:
    """A random RGB image of ``size`` (side, or (width, height)); the format follows the suffix (.png or .jpg)."""
    width, height = (size, size) if isinstance(size, int) else size
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
    return path


def write_imagefolder(root: Path, classes: dict[str, int], *, splits: tuple[str, ...] = (), seed: int = 0,
                      size: int | tuple[int, int] = 16) -> Path:
    """``root/[split/]class/NNNN.{png,jpg}``: ``classes[name]`` images per class (and split); formats alternate."""
    rng = np.random.default_rng(seed)
    for prefix in splits or ("",):
        for name, count in classes.items():
            for i in range(count):
                write_image(root / prefix / name / f"{i:04d}.{'png' if i % 2 else 'jpg'}", rng, size)
    return root


def write_waterbirds(root: Path, n: int, *, seed: int = 0, size: int = 16) -> Path:
    """``root/metadata.csv`` + ``root/NNN.Species/Species_NNNN.jpg`` with y, place and split cycling over all cells."""
    rng = np.random.default_rng(seed)
    lines = [WATERBIRDS_HEADER]
    for i in range(n):
        y, place, split = i % 2, (i // 2) % 2, (i // 4) % 3
        name = f"{'002.Laysan_Albatross' if y else '001.Black_footed_Albatross'}/img_{i:05d}.jpg"
        write_image(root / name, rng, size)
        lines.append(f"{i + 1},{name},{y},{split},{place},{'water' if place else 'land'}/x/{i}.jpg")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return root


SHORTCUT_COLOURS = {"red": (200, 40, 40), "green": (40, 160, 60), "blue": (40, 70, 200)}
SHORTCUT_CLASSES = {"circle": "red", "square": "green", "triangle": "blue"}
CONTEXT_TAGS = ("grass", "sky", "table", "wall", "street", "snow")
SIDECAR_NAME = "tags.csv"


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, centre: tuple[float, float], radius: float) -> None:
    x, y = centre
    if shape == "circle":
        draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=(235, 235, 235))
    elif shape == "square":
        draw.rectangle((x - radius, y - radius, x + radius, y + radius), fill=(235, 235, 235))
    else:
        draw.polygon([(x, y - radius), (x - radius, y + radius), (x + radius, y + radius)], fill=(235, 235, 235))


def write_shortcut_imagefolder(root: Path, per_class: int, *, classes: int = 3, align: float = 0.9, seed: int = 0,
                               size: int = 32) -> tuple[Path, Path]:
    """``root/<shape>/NNNN.png`` (the first ``classes`` of circle, square, triangle) and a tags sidecar
    ``root.parent/tags.csv``.

    The planted shortcut: a class's images are on its own background colour (circle red, square green, triangle
    blue) with probability ``align``, else on another colour. The sidecar, as an external tagger writes it, names each
    image's background colour and one context tag drawn independently of the class."""
    rng = np.random.default_rng([seed, 25])  # not seed alone: the importer's split draws from default_rng(seed)
    rows = []
    for shape, own in list(SHORTCUT_CLASSES.items())[:classes]:
        others = [c for c in SHORTCUT_COLOURS if c != own]
        for i in range(per_class):
            colour = own if rng.random() < align else others[int(rng.integers(len(others)))]
            background = np.array(SHORTCUT_COLOURS[colour]) + rng.normal(0, 12, (size, size, 3))
            image = Image.fromarray(background.clip(0, 255).astype(np.uint8))
            radius = size * rng.uniform(0.12, 0.22)
            centre = tuple(rng.uniform(radius + 1, size - radius - 1, 2))
            _draw_shape(ImageDraw.Draw(image), shape, centre, radius)
            name = f"{shape}/{i:04d}.png"
            (root / shape).mkdir(parents=True, exist_ok=True)
            image.save(root / name)
            rows.append((name, f"{colour};{CONTEXT_TAGS[int(rng.integers(len(CONTEXT_TAGS)))]}"))
    sidecar = root.parent / SIDECAR_NAME
    sidecar.write_text("image,tags\n" + "".join(f"{name},{tags}\n" for name, tags in rows))
    return root, sidecar
