"""Checks of a manifest before work is spent on it: what it must hold to train and evaluate, and what it should."""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd

from mavias.core.manifest.info import DatasetInfo
from mavias.errors import UserError

HELD_OUT = ("val", "test")
MIN_CLASSES = 2


def require_trainable(manifest: pd.DataFrame, source: object) -> list[str]:
    """The training split's classes, when a model can be trained and selected on ``manifest``: at least two classes
    and a validation split; else a :class:`UserError` that says what to add."""
    classes = sorted(manifest.loc[manifest["split"] == "train", "label"].unique())
    if len(classes) < MIN_CLASSES:
        found = f"only class {classes[0]!r}" if classes else "no usable training image"
        raise UserError(f"{source}: {found} in the training split; a classifier needs at least {MIN_CLASSES} "
                        "classes", hint="add a folder per class, each with at least 2 images (one to train on, one "
                                        "to validate with)")
    if not (manifest["split"] == "val").any():
        raise UserError(f"{source} has no validation image: choosing the model needs at least one per class",
                        hint="give each class at least 2 images (the import holds one of them back for validation), "
                             "or mark some as split 'val'")
    return classes


def evaluation_split(splits: Collection[str], info: DatasetInfo | None) -> str | None:
    """The split a model is evaluated on: ``test``, else the dataset's first named evaluation split it holds; None
    when it holds neither."""
    named = [split for split in (info.eval_splits if info else []) if split in splits]
    return "test" if "test" in splits else next(iter(named), None)


def require_evaluable(manifest: pd.DataFrame, info: DatasetInfo | None, source: object) -> str:
    """The split to evaluate on, or a :class:`UserError` that says what to add (before any training)."""
    split = evaluation_split(set(manifest["split"]), info)
    if split is None:
        raise UserError(f"{source} has no test image: the models are evaluated on a test split",
                        hint="add a test/ folder beside train/ (test/<class>/...), or give each class at least 3 "
                             "images (the import holds one of them back for testing)")
    return split


def small_class_warnings(manifest: pd.DataFrame) -> list[str]:
    """Fewer than two classes, and classes without a validation or a test image (when the manifest has such a split):
    model selection or the evaluation cannot see them."""
    counts = pd.crosstab(manifest["label"], manifest["split"])
    present = [split for split in HELD_OUT if split in counts.columns]
    warnings = []
    if len(counts) < MIN_CLASSES:
        warnings.append(f"only {len(counts)} class ({', '.join(map(repr, counts.index))}): a classifier needs at least "
                        f"{MIN_CLASSES}; add a folder per class")
    for name, row in counts.iterrows():
        missing = [split for split in present if row[split] == 0]
        if missing:
            warnings.append(f"class {name!r} has {int(row.sum())} image(s) and no {' or '.join(missing)} image, so "
                            f"{'model selection' if 'val' in missing else 'the evaluation'} cannot see it: add images "
                            "(3 per class give one of each), or merge or drop the class")
    return warnings
