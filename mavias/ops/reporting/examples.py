"""Example images of each shortcut, for the report: a tag is the tagger's word for what it saw, and the word can be
wrong (a white airplane called pink, a lamp called a snowman), so the reader checks a shortcut by looking at the
images behind it.

Per shortcut shown (the top ``TOP_K`` of each class's B'), one strip of validation images (the split whose images
measured the reliance): up to ``PER_SIDE`` of the class carrying the tag, a gap, then up to ``PER_SIDE`` of other
classes carrying it (what the word means away from the class). First images in manifest order, so a night's strips
are reproducible. An image that cannot be read is left out; a strip never fails the report.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
from PIL import Image, ImageOps
from pydantic import BaseModel, ConfigDict

from mavias.ops.reporting.history import TOP_K

PER_SIDE = 4
THUMBNAIL = 40  # pixels per image: smaller images are enlarged without smoothing, so their pixels stay sharp
GAP, SIDE_GAP = 2, 14  # between images, and between the class's images and the other classes'
BACKGROUND = (255, 255, 255)


class Example(BaseModel):
    """One shortcut's strip and how many of its images are of the class and of other classes."""

    model_config = ConfigDict(frozen=True)

    png: bytes
    in_class: int
    others: int


def shortcut_examples(biased: pd.DataFrame, labels: Sequence[str], tags: Sequence[Iterable[str] | None],
                      paths: Sequence[Path]) -> dict[str, dict[str, Example]]:
    """class -> tag -> its :class:`Example`, for the top shortcuts of each class in ``biased`` (B', ranked), from the
    images at ``paths`` with their ``labels`` and ``tags``; a shortcut without a readable image has none."""
    carried = [frozenset(t) if t is not None else frozenset() for t in tags]
    ranked = biased.assign(rank=pd.to_numeric(biased["rank"], errors="coerce")).sort_values("rank")
    examples: dict[str, dict[str, Example]] = {}
    for name, rows in ranked.groupby("class", sort=True):
        for tag in rows["tag"].astype(str).head(TOP_K):
            own = _thumbnails(p for p, label, t in zip(paths, labels, carried) if label == name and tag in t)
            others = _thumbnails(p for p, label, t in zip(paths, labels, carried) if label != name and tag in t)
            if own or others:
                examples.setdefault(str(name), {})[tag] = Example(png=strip(own, others), in_class=len(own),
                                                                  others=len(others))
    return examples


def example_images(examples: dict[str, dict[str, Example]]) -> dict[str, bytes]:
    """The strips by :func:`example_name` (the same images once)."""
    return {example_name(example.png): example.png for by_tag in examples.values() for example in by_tag.values()}


def example_name(png: bytes) -> str:
    """A strip's image name, from its content: file and content-id safe, the same for the same images."""
    return f"example-{hashlib.sha256(png).hexdigest()[:16]}.png"


def strip(own: Sequence[Image.Image], others: Sequence[Image.Image]) -> bytes:
    """``own`` then, after a wider gap, ``others``, side by side as one PNG."""
    spans = [len(side) * THUMBNAIL + max(len(side) - 1, 0) * GAP for side in (own, others)]
    canvas = Image.new("RGB", (spans[0] + spans[1] + (SIDE_GAP if own and others else 0), THUMBNAIL), BACKGROUND)
    x = 0
    for side in (own, others):
        for image in side:
            canvas.paste(image, (x, 0))
            x += THUMBNAIL + GAP
        x += SIDE_GAP - GAP if side else 0
    out = io.BytesIO()
    canvas.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _thumbnails(paths: Iterable[Path]) -> list[Image.Image]:
    """The first ``PER_SIDE`` readable images of ``paths`` as thumbnails."""
    found = []
    for path in paths:
        if (image := _thumbnail(path)) is not None:
            found.append(image)
            if len(found) == PER_SIDE:
                break
    return found


def _thumbnail(path: Path) -> Image.Image | None:
    try:
        with Image.open(path) as image:
            image.draft("RGB", (THUMBNAIL, THUMBNAIL))  # a JPEG decodes at a reduced scale
            small = max(image.size) <= THUMBNAIL
            method = Image.Resampling.NEAREST if small else Image.Resampling.BOX
            return ImageOps.pad(image.convert("RGB"), (THUMBNAIL, THUMBNAIL), method=method, color=BACKGROUND)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
