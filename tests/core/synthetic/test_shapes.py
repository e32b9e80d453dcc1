import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from mavias.core.manifest import load_manifest
from mavias.core.relevance import irrelevant_tags, load_relevance
from mavias.core.synthetic.shapes import (
    COLOURS,
    TEXTURES,
    ShapesConfig,
    ShapeTexturesConfig,
    make_shapes,
    true_shortcut_tags,
)

SMALL = ShapesConfig(n_train=400, n_val=200, n_test_per_cell=1, image_size=16, seed=3)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = make_shapes(tmp_path_factory.mktemp("shapes"), SMALL)
    return path, load_manifest(path)


def test_deterministic_and_seed_dependent(tmp_path):
    tiny = ShapesConfig(n_train=20, n_val=10, n_test_per_cell=1, image_size=16, n_classes=3, seed=1)
    a, b = make_shapes(tmp_path / "a", tiny), make_shapes(tmp_path / "b", tiny)
    c = make_shapes(tmp_path / "c", tiny.model_copy(update={"seed": 2}))
    assert a.read_bytes() == b.read_bytes()
    assert not pd.read_parquet(a)["sample_id"].equals(pd.read_parquet(c)["sample_id"])


def test_only_shortcut_classes_carry_the_colour_shortcut(small):
    _, manifest = small
    train = manifest[manifest["split"] == "train"]
    shortcut = set(SMALL.shortcut_classes)
    assert len(shortcut) == 5
    aligned = (train["attr_bias_aligned"] == "1").groupby(train["label"]).mean()
    for name, rate in aligned.items():
        assert rate == pytest.approx(0.95, abs=0.02) if name in shortcut else rate == 1.0  # no shortcut, no conflict
    expected = train["label"].map(dict(zip(SMALL.classes, list(COLOURS))))
    in_shortcut = train["label"].isin(shortcut)
    assert ((train["attr_colour"] == expected)[in_shortcut] == (train["attr_bias_aligned"] == "1")[in_shortcut]).all()
    assert (train.loc[~in_shortcut, "attr_colour"] == expected[~in_shortcut]).mean() < 0.3


def test_test_split_is_balanced_over_class_and_value(small):
    _, manifest = small
    test = manifest[manifest["split"] == "test"]
    assert len(test) == 10 * 10
    assert test.groupby(["label", "attr_colour"]).size().eq(1).all()


def test_relevance_and_true_shortcut_tags(small):
    path, manifest = small
    relevance = load_relevance(path.parent / "relevance.parquet")
    irrelevant = irrelevant_tags(manifest["label"], manifest["tags"], relevance)
    for label, tags in zip(manifest["label"], irrelevant):
        assert label not in tags
    info = json.loads((path.parent / "benchmark.json").read_text())
    assert info["shortcut_tags"] == {"circle": "red", "triangle": "blue", "square": "yellow", "diamond": "green",
                                     "pentagon": "purple"}
    image = Image.open(path.parent / manifest["uri"].iloc[0])
    assert image.size == (16, 16) and np.asarray(image).std() > 10


def test_texture_variant_defaults():
    cfg = ShapeTexturesConfig()
    assert cfg.shortcut == "texture" and cfg.n_classes == 12 and len(cfg.shortcut_classes) == 4
    assert set(true_shortcut_tags(cfg).values()) <= set(TEXTURES)
    with pytest.raises(ValueError):
        ShapesConfig(n_classes=13)
