"""Taggers describe images with scored tags; the tags table is the one format every tagger's output takes.

Tags table: ``sample_id`` str, ``tag`` str, ``score`` float32 (one row per tag kept for an image).
Class tag counts: ``class`` str, ``tag`` str, ``count`` int (number of images of the class carrying the tag).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import pandas as pd
from PIL import Image

from mavias.errors import UserError
from mavias.utils.atomic import atomic_path
from mavias.utils.tables import parquet_columns, read_parquet

if TYPE_CHECKING:
    import torch

TAGS_COLUMNS = ["sample_id", "tag", "score"]
CLASS_TAG_COUNT_COLUMNS = ["class", "tag", "count"]

ScoredTags = list[tuple[str, float]]


@dataclass(frozen=True)
class TagBatch:
    rows: pd.DataFrame  # the manifest rows of the batch, in order
    images: torch.Tensor | None  # their preprocessed pixels, for taggers that read images


@runtime_checkable
class Tagger(Protocol):
    @property
    def tagger_id(self) -> str:
        """Identifies model, weights, vocabulary and cut-offs: tags from different taggers are never mixed."""

    @property
    def preprocess(self) -> Callable[[Image.Image], torch.Tensor] | None:
        """Image -> tensor for the data loader; ``None`` for taggers that never look at pixels."""

    def tag(self, batch: TagBatch) -> list[ScoredTags]:
        """Per row of the batch, its (tag, score) pairs, highest score first."""


def empty_tags_table() -> pd.DataFrame:
    return pd.DataFrame(
        {"sample_id": pd.Series(dtype=str), "tag": pd.Series(dtype=str), "score": pd.Series(dtype=np.float32)}
    )


def tags_table(sample_ids: Sequence[str], predictions: Sequence[ScoredTags]) -> pd.DataFrame:
    rows = [(sid, tag, score) for sid, scored in zip(sample_ids, predictions) for tag, score in scored]
    if not rows:
        return empty_tags_table()
    df = pd.DataFrame(rows, columns=TAGS_COLUMNS)
    return df.astype({"sample_id": str, "tag": str, "score": np.float32})


def write_tags(df: pd.DataFrame, path: str | Path) -> Path:
    with atomic_path(path) as tmp:
        df[TAGS_COLUMNS].astype({"score": np.float32}).to_parquet(tmp, index=False)
    return Path(path)


def read_tags(path: str | Path, columns: Sequence[str] = TAGS_COLUMNS) -> pd.DataFrame:
    """A tags table (``mavias tag`` / ``mavias discover`` output), only ``columns`` of it; a file of another kind
    (or one lacking a column asked for) is a readable error."""
    names = parquet_columns(Path(path), what="tags table")
    if missing := [column for column in columns if column not in names]:
        raise UserError(f"{path} is not a tags table: it lacks the column(s) {', '.join(missing)} (it has: "
                        f"{', '.join(names)})", hint="pass the tags.parquet that `mavias tag` or `mavias discover` "
                                                     "wrote")
    return read_parquet(Path(path), what="tags table", columns=list(columns))


def tag_lists(tags: pd.DataFrame, sample_ids: Sequence[str]) -> pd.Series:
    """Per sample id, its sorted tags (an empty list for an image without tags), indexed like ``sample_ids``."""
    grouped = tags.groupby("sample_id")["tag"].agg(lambda s: sorted(set(s)))
    return pd.Series([grouped.get(sid, []) for sid in sample_ids], name="tags")


def class_tag_counts(tags: pd.DataFrame, manifest: pd.DataFrame) -> pd.DataFrame:
    """How many images of each class carry each tag, most frequent first."""
    labelled = tags[["sample_id", "tag"]].drop_duplicates().merge(manifest[["sample_id", "label"]], on="sample_id")
    counts = labelled.groupby(["label", "tag"]).size().rename("count").reset_index().rename(columns={"label": "class"})
    return counts.sort_values(["class", "count", "tag"], ascending=[True, False, True], ignore_index=True)[
        CLASS_TAG_COUNT_COLUMNS
    ]


RANDOM_WEIGHTS_WARNING = ("the tags come from a randomly initialised model (--pretrained none): they are noise, and so "
                          "is every bias found from them; use pretrained weights (--weights-dir, --allow-download) or "
                          "your own tags (a tags sidecar: mavias data import imagefolder ROOT --tags tags.csv)")


def random_weights(tagger: Tagger) -> bool:
    """Whether the tagger looks through an untrained model (taggers without weights never do)."""
    return bool(getattr(tagger, "random_weights", False))


def tagging_warnings(tagger: Tagger, tags: pd.DataFrame, n_images: int) -> list[str]:
    """What to warn about a partition's tags: noise from random weights, and images left without any tag."""
    warnings = [RANDOM_WEIGHTS_WARNING] if random_weights(tagger) else []
    untagged = n_images - tags["sample_id"].nunique()
    if n_images and untagged == n_images:
        fix = ("give the images tags in the tags sidecar" if tagger.preprocess is None else
               "lower --threshold (a tag is kept at threshold x 1/|vocabulary|), use pretrained weights, or bring your "
               "own tags (a tags sidecar)")
        warnings.append(f"0 tags kept for all {n_images} images: no bias can be found without tags; {fix}")
    elif untagged > n_images / 2:
        warnings.append(f"{untagged} of {n_images} images have no tag: biases are only found among tagged images")
    return warnings
