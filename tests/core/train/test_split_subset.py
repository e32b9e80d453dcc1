"""A split's subset (the cross-fitted references' folds): the same images in the given order, whichever way the
split holds them, with their labels, tables and embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from mavias.core.train.config import TrainConfig
from mavias.core.train.data import ImageSplit, SplitData
from mavias.core.train.transforms import eval_transform, train_transform

CFG = TrainConfig(image_size=16)


def _images(tmp_path: Path, n: int = 6) -> list[Path]:
    paths = []
    for i in range(n):
        path = tmp_path / f"{i}.png"
        Image.fromarray(np.full((16, 16, 3), 40 * i, dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


@pytest.mark.parametrize("held", ["cache", "sources", "lazily"])
def test_a_subset_holds_the_rows_asked_for_in_their_order(tmp_path: Path, held: str, monkeypatch) -> None:
    if held == "lazily":
        monkeypatch.setattr("mavias.core.train.data.PRELOAD_LIMIT_BYTES", 0)
    random = held != "cache"
    inputs = ImageSplit(_images(tmp_path), train_transform(CFG) if random else eval_transform(CFG), 16, random=random,
                        plain=eval_transform(CFG))
    assert (inputs.cache is not None, inputs.sources is not None) == (held == "cache", held == "sources")
    split = SplitData(inputs, pd.DataFrame({"sample_id": [f"s{i}" for i in range(6)]}), torch.arange(6),
                      embeddings=torch.arange(6.0)[:, None])
    rows = np.array([4, 1, 5])
    part = split.subset(rows)
    assert part.frame["sample_id"].tolist() == ["s4", "s1", "s5"] and part.labels.tolist() == [4, 1, 5]
    assert part.embeddings[:, 0].tolist() == [4.0, 1.0, 5.0] and part.augmented == random
    plain = part.unaugmented().inputs
    assert [int(plain[i].float().mean()) for i in range(3)] == [160, 40, 200]  # each image's own grey level
