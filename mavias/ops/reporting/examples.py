"""Example images of each shortcut, for the report: a tag is the tagger's word for what it saw, and the word can be
wrong (a white airplane called pink, a lamp called a snowman), so the reader checks a shortcut by looking at the
images behind it.

Per shortcut shown (the top ``TOP_K`` of each class's B'), one strip of validation images: up to ``PER_SIDE`` of the
class carrying the tag, a gap, then up to ``PER_SIDE`` of other classes carrying it (what the word means away from
the class). First images in manifest order, so a night's strips are reproducible. Each class's first shortcut comes
before any class's second until the strips reach ``MAX_BYTES`` together, so the email stays small. An image that
cannot be read is left out.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pandas as pd
from PIL import Image, ImageOps
from pydantic import BaseModel, ConfigDict

from mavias.ops.reporting.history import TOP_K, biased_tags_by_class

PER_SIDE = 4
THUMBNAIL = 40  # pixels per image: smaller images are enlarged without smoothing, so their pixels stay sharp
GAP, SIDE_GAP = 2, 14  # between images, and between the class's images and the other classes'
BACKGROUND = (255, 255, 255)
MAX_BYTES = 2_000_000  # all strips together; an email of a few MB passes every common mail server's limit


class Example(BaseModel):
    """One shortcut's strip and how many of its images are of the class and of other classes."""

    model_config = ConfigDict(frozen=True)

    png: bytes
    in_class: int
    others: int


def shortcut_examples(biased: pd.DataFrame, labels: Sequence[str], tags: Sequence[Iterable[str] | None],
                      paths: Sequence[Path], *, max_bytes: int = MAX_BYTES) -> dict[str, dict[str, Example]]:
    """class -> tag -> its :class:`Example`, for the shortcuts of ``biased`` (B', ranked) the report shows, from the
    images at ``paths`` with their ``labels`` and ``tags``; a shortcut without a readable image has none, nor have
    those past ``max_bytes``."""
    carriers: dict[str, list[int]] = {}
    for row, carried in enumerate(tags):
        for tag in set(carried if carried is not None else ()):
            carriers.setdefault(tag, []).append(row)
    thumbnail = functools.cache(lambda row: _thumbnail(paths[row]))
    by_class = biased_tags_by_class(biased)
    examples: dict[str, dict[str, Example]] = {}
    spent: set[bytes] = set()  # each distinct strip counts once against the budget
    used = 0
    for rank in range(TOP_K):
        for name, class_tags in by_class.items():
            if rank >= len(class_tags):
                continue
            rows = carriers.get(class_tags[rank], [])
            own = _first_readable((r for r in rows if labels[r] == name), thumbnail)
            others = _first_readable((r for r in rows if labels[r] != name), thumbnail)
            if not own and not others:
                continue
            png = strip(own, others)
            if png not in spent:
                if used + len(png) > max_bytes:
                    return examples
                spent.add(png)
                used += len(png)
            examples.setdefault(name, {})[class_tags[rank]] = Example(png=png, in_class=len(own), others=len(others))
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


def _first_readable(rows: Iterable[int], thumbnail: Callable[[int], Image.Image | None]) -> list[Image.Image]:
    found = []
    for row in rows:
        if (image := thumbnail(row)) is not None:
            found.append(image)
            if len(found) == PER_SIDE:
                break
    return found


def _thumbnail(path: Path) -> Image.Image | None:
    try:
        with Image.open(path) as image:
            image.draft("RGB", (THUMBNAIL, THUMBNAIL))  # a JPEG decodes at a reduced scale
            image.thumbnail((THUMBNAIL, THUMBNAIL), Image.Resampling.BOX)  # shrinks before the colour conversion
            return ImageOps.pad(image.convert("RGB"), (THUMBNAIL, THUMBNAIL), method=Image.Resampling.NEAREST,
                                color=BACKGROUND)
    except Exception:  # PIL raises many unrelated types for broken files (as quarantine.image_problem)
        return None
