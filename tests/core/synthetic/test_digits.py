"""digit-backgrounds: ten digits whose background colour is a 95% shortcut in every class."""

import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from mavias.core.manifest import load_manifest
from mavias.core.relevance import irrelevant_tags, load_relevance
from mavias.core.synthetic.digits import BACKGROUNDS, DIGITS, DigitsConfig, make_digits
from mavias.core.synthetic.shapes import COLOURS

SMALL = DigitsConfig(n_train=400, n_val=100, n_test_per_cell=1, image_size=20, seed=2)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = make_digits(tmp_path_factory.mktemp("digits"), SMALL)
    return path, load_manifest(path)


def test_deterministic_and_seed_dependent(tmp_path):
    tiny = SMALL.model_copy(update={"n_train": 20, "n_val": 10})
    a, b = make_digits(tmp_path / "a", tiny), make_digits(tmp_path / "b", tiny)
    c = make_digits(tmp_path / "c", tiny.model_copy(update={"seed": 3}))
    assert a.read_bytes() == b.read_bytes()
    assert not pd.read_parquet(a)["sample_id"].equals(pd.read_parquet(c)["sample_id"])


def test_every_class_carries_its_background_at_the_configured_rate(small):
    _, manifest = small
    for split, rate in (("train", 0.95), ("val", 1.0)):  # 40 train images a class (38 aligned), 10 val (round(9.5))
        part = manifest[manifest["split"] == split]
        aligned = part["attr_background"] == part["label"].map(dict(zip(DIGITS, BACKGROUNDS)))
        assert (aligned == (part["attr_bias_aligned"] == "1")).all()
        assert aligned.groupby(part["label"]).mean().round(2).eq(rate).all()  # exact within every class


def test_the_test_split_is_balanced_over_digit_and_colour(small):
    _, manifest = small
    test = manifest[manifest["split"] == "test"]
    assert test.groupby(["label", "attr_background"]).size().eq(SMALL.n_test_per_cell).all()
    assert len(test) == len(DIGITS) * len(BACKGROUNDS) * SMALL.n_test_per_cell


def test_images_have_the_configured_size_and_their_background_colour(small):
    path, manifest = small
    row = manifest[manifest["split"] == "train"].iloc[0]
    with Image.open(path.parent / row["uri"]) as image:
        assert image.size == (SMALL.image_size, SMALL.image_size)
        corner = np.asarray(image.convert("RGB"), dtype=float)[:3, :3].mean(axis=(0, 1))
    assert np.abs(corner - np.array(COLOURS[row["attr_background"]])).max() < 40


def test_relevance_marks_the_digit_and_numeral_relevant_and_the_colour_irrelevant(small):
    path, manifest = small
    relevance = load_relevance(path.parent / "relevance.parquet")
    irrelevant = irrelevant_tags(manifest["label"], manifest["tags"], relevance)
    for label, tags in zip(manifest["label"], irrelevant):
        assert label not in tags and "numeral" not in tags
    info = json.loads((path.parent / "benchmark.json").read_text())
    assert info["shortcut_tags"] == dict(zip(DIGITS, BACKGROUNDS))
