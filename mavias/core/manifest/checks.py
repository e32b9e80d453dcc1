"""Checks of a manifest that warn rather than fail."""

from __future__ import annotations

import pandas as pd

HELD_OUT = ("val", "test")


def small_class_warnings(manifest: pd.DataFrame) -> list[str]:
    """Classes without a validation or a test image (when the manifest has such a split): model selection or the
    evaluation cannot see them."""
    counts = pd.crosstab(manifest["label"], manifest["split"])
    present = [split for split in HELD_OUT if split in counts.columns]
    warnings = []
    for name, row in counts.iterrows():
        missing = [split for split in present if row[split] == 0]
        if missing:
            warnings.append(f"class {name!r} has {int(row.sum())} image(s) and no {' or '.join(missing)} image, so "
                            f"{'model selection' if 'val' in missing else 'the evaluation'} cannot see it: add images "
                            "(about 10 per class give one of each at the default 10% splits), or merge or drop the "
                            "class")
    return warnings
