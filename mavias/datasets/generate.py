"""Tiny generated trees in the published layouts (ImageFolder, Waterbirds) for tests and ``mavias bench data``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

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
