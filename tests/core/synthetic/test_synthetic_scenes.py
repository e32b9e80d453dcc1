import itertools
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from pydantic import ValidationError

from mavias.core.manifest import content_sample_id, load_manifest
from mavias.core.relevance import load_relevance
from mavias.core.synthetic import SyntheticScenesConfig, ThreeCueScenesConfig, make_synthetic_scenes
from mavias.core.synthetic.synthetic_scenes import (
    BACKGROUND_TAGS,
    COLORS,
    COOBJECT_TAGS,
    LIGHTING,
    SCENE_CLASSES,
    SIZES,
    benchmark_vocabulary,
    emit_tags,
    plan_split,
)

SMALL = SyntheticScenesConfig(n_train=240, n_val=30, n_test_per_cell=2, image_size=32, seed=7)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> Path:
    return make_synthetic_scenes(tmp_path_factory.mktemp("scenes"), SMALL)


@pytest.fixture(scope="module")
def manifest(small_dataset) -> pd.DataFrame:
    return load_manifest(small_dataset)


def _tiny(seed: int) -> SyntheticScenesConfig:
    return SyntheticScenesConfig(n_train=12, n_val=3, n_test_per_cell=1, image_size=32, seed=seed)


def _image_bytes(manifest_path: Path) -> dict[str, bytes]:
    return {uri: (manifest_path.parent / uri).read_bytes() for uri in pd.read_parquet(manifest_path)["uri"]}


def test_same_seed_gives_identical_files_and_another_seed_differs(tmp_path):
    first = make_synthetic_scenes(tmp_path / "a", _tiny(1))
    again = make_synthetic_scenes(tmp_path / "b", _tiny(1))
    other = make_synthetic_scenes(tmp_path / "c", _tiny(2))
    assert first.read_bytes() == again.read_bytes()
    assert (tmp_path / "a" / "relevance.parquet").read_bytes() == (tmp_path / "b" / "relevance.parquet").read_bytes()
    assert _image_bytes(first) == _image_bytes(again)
    assert set(_image_bytes(first).values()).isdisjoint(_image_bytes(other).values())
    assert not pd.read_parquet(first).equals(pd.read_parquet(other))


def test_images_are_made_durable_by_one_sync_before_the_manifest_not_an_fsync_each(tmp_path, monkeypatch):
    fsyncs, manifest_at_sync = [], []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(os, "sync", lambda: manifest_at_sync.append((tmp_path / "manifest.parquet").exists()))
    manifest = load_manifest(make_synthetic_scenes(tmp_path, _tiny(3)))
    assert manifest_at_sync == [False]
    assert len(fsyncs) <= 6 < len(manifest)  # the relevance table, benchmark.json and the manifest, with folders


def test_manifest_loads_with_the_contract_columns(manifest):
    attributes = ("background", "coobject", "bg_aligned", "coobj_aligned", "color", "size", "lighting")
    expected = {"sample_id", "uri", "label", "split", "tags"} | {f"attr_{name}" for name in attributes}
    assert expected == set(manifest.columns)
    assert manifest["split"].value_counts().to_dict() == {"train": 240, "val": 30, "test": 2 * 27}
    assert manifest["label"].value_counts().nunique() == 1  # balanced classes
    for column in [c for c in manifest.columns if c.startswith("attr_")]:
        assert manifest[column].map(type).eq(str).all(), column


def test_images_decode_at_the_configured_size_and_ids_hash_their_bytes(small_dataset, manifest):
    for row in manifest.sample(20, random_state=0).itertuples():
        data = (small_dataset.parent / row.uri).read_bytes()
        assert row.sample_id == content_sample_id(data)
        with Image.open(small_dataset.parent / row.uri) as image:
            assert (image.size, image.mode) == ((32, 32), "RGB")


def test_test_split_is_balanced_over_every_cell(manifest):
    test = manifest[manifest["split"] == "test"]
    cells = Counter(zip(test["label"], test["attr_background"], test["attr_coobject"]))
    expected = itertools.product(SMALL.classes, SMALL.backgrounds, SMALL.coobjects)
    assert cells == {cell: SMALL.n_test_per_cell for cell in expected}


def test_training_alignment_rates_are_exact_per_class_and_independent():
    cfg = SyntheticScenesConfig(n_train=3000, bg_align=0.9, coobj_align=0.8)
    plans = pd.DataFrame([vars(p) for p in plan_split("train", cfg)])
    plans["bg_aligned"] = plans["background"] == plans["label"].map(lambda c: SCENE_CLASSES[c].background)
    plans["co_aligned"] = plans["coobject"] == plans["label"].map(lambda c: SCENE_CLASSES[c].coobject)
    per_class = plans.groupby("label")[["bg_aligned", "co_aligned"]].mean()
    assert np.allclose(per_class["bg_aligned"], 0.9) and np.allclose(per_class["co_aligned"], 0.8)
    assert plans.loc[~plans["bg_aligned"], "co_aligned"].mean() == pytest.approx(0.8, abs=0.06)
    conflicting = plans[~plans["bg_aligned"]]
    share_per_other_background = conflicting.groupby("label")["background"].value_counts(normalize=True)
    assert share_per_other_background.between(0.35, 0.65).all()  # uniform over the K-1 other backgrounds
    for attribute in ("color", "size", "lighting"):  # nuisance attributes carry no class information
        shares = pd.crosstab(plans["label"], plans[attribute], normalize="index")
        assert (shares.max() - shares.min()).max() < 0.08, attribute


def test_manifest_alignment_flags_match_the_attributes(manifest):
    aligned_bg = manifest["attr_background"] == manifest["label"].map(lambda c: SCENE_CLASSES[c].background)
    assert (manifest["attr_bg_aligned"] == np.where(aligned_bg, "1", "0")).all()
    train = manifest[manifest["split"] == "train"]
    assert (train["attr_bg_aligned"] == "1").mean() == pytest.approx(SMALL.bg_align, abs=0.01)
    assert (train["attr_coobj_aligned"] == "1").mean() == pytest.approx(SMALL.coobj_align, abs=0.01)


def test_tagger_noise_rates():
    cfg = SyntheticScenesConfig(tag_miss_rate=0.2, spurious_tags_per_image=0.7)
    vocabulary = benchmark_vocabulary(cfg.classes)
    true_tags = ("car", "wheel", "street", "road", "asphalt", "traffic light", "red", "small", "dusk")
    rng = np.random.default_rng(0)
    draws = [set(emit_tags(true_tags, vocabulary, cfg, rng)) for _ in range(4000)]
    missed = np.mean([len(set(true_tags) - tags) / len(true_tags) for tags in draws])
    spurious = np.mean([len(tags - set(true_tags)) for tags in draws])
    assert missed == pytest.approx(0.2, abs=0.01)
    assert spurious == pytest.approx(0.7, abs=0.04)


def test_manifest_tags_are_noisy_tagger_output(manifest):
    tags = manifest["tags"].map(set)
    assert set().union(*tags) <= set(benchmark_vocabulary(SMALL.classes))
    class_word_rate = np.mean([label in t for label, t in zip(manifest["label"], tags)])
    assert class_word_rate == pytest.approx(1 - SMALL.tag_miss_rate, abs=0.04)
    background_word_rate = np.mean([BACKGROUND_TAGS[b][0] in t for b, t in zip(manifest["attr_background"], tags)])
    assert background_word_rate == pytest.approx(1 - SMALL.tag_miss_rate, abs=0.04)
    part_counts = [len(t & set(SCENE_CLASSES[label].parts)) for label, t in zip(manifest["label"], tags)]
    assert 1 <= np.mean(part_counts) <= 3


def test_relevance_table_is_complete_and_marks_class_words_and_parts(small_dataset):
    relevance = load_relevance(small_dataset.parent / "relevance.parquet")
    vocabulary = benchmark_vocabulary(SMALL.classes)
    assert set(zip(relevance["class"], relevance["tag"])) == set(itertools.product(SMALL.classes, vocabulary))
    assert len(relevance) == len(SMALL.classes) * len(vocabulary)
    assert (relevance["source"] == "ground_truth").all()
    for name in SMALL.classes:
        relevant = set(relevance.loc[(relevance["class"] == name) & relevance["relevant"], "tag"])
        assert relevant == {name, *SCENE_CLASSES[name].parts}


def test_benchmark_info_records_config_vocabulary_and_counts(small_dataset, manifest):
    info = json.loads((small_dataset.parent / "benchmark.json").read_text())
    assert SyntheticScenesConfig(**info["config"]) == SMALL
    assert info["vocabulary"] == benchmark_vocabulary(SMALL.classes)
    totals = {split: counts["total"] for split, counts in info["counts"].items()}
    assert totals == manifest["split"].value_counts().to_dict()
    assert sum(info["counts"]["train"]["groups"].values()) == SMALL.n_train


def test_tag_words_have_one_meaning_across_the_catalogue():
    parts = [part for scene_class in SCENE_CLASSES.values() for part in scene_class.parts]
    scene_words = [*SCENE_CLASSES, *itertools.chain(*BACKGROUND_TAGS.values(), *COOBJECT_TAGS.values())]
    nuisance = [*COLORS, *SIZES, *LIGHTING]
    words = parts + scene_words + nuisance
    assert len(words) == len(set(words))
    assert all(word == word.lower().strip() for word in words)


def test_every_class_of_the_catalogue_renders(tmp_path):
    cfg = SyntheticScenesConfig(classes=tuple(SCENE_CLASSES), n_train=6, n_val=6, n_test_per_cell=1, image_size=32)
    manifest = load_manifest(make_synthetic_scenes(tmp_path, cfg))
    assert manifest.loc[manifest["split"] == "test", "label"].value_counts().eq(len(SCENE_CLASSES) ** 2).all()


@pytest.mark.parametrize(
    "bad",
    [{"classes": ("car", "bird")}, {"classes": ("car", "bird", "zebra")}, {"classes": ("car", "car", "bird")},
     {"bg_align": 1.5}, {"tag_miss_rate": 1.0}, {"unknown_option": 1}],
)
def test_config_rejects_invalid_values(bad):
    with pytest.raises(ValidationError):
        SyntheticScenesConfig(**bad)


def test_three_cue_scenes_align_background_co_object_and_colour_at_their_rates():
    cfg = ThreeCueScenesConfig(n_train=3000, bg_align=0.9, coobj_align=0.8, color_align=0.7)
    plans = pd.DataFrame([vars(p) for p in plan_split("train", cfg)])
    aligned = {key: plans[key] == plans["label"].map(lambda c, key=key: getattr(SCENE_CLASSES[c], key))
               for key in ("background", "coobject", "color")}
    for key, rate in (("background", 0.9), ("coobject", 0.8), ("color", 0.7)):
        assert np.allclose(aligned[key].groupby(plans["label"]).mean(), rate), key
    assert aligned["color"][~aligned["background"]].mean() == pytest.approx(0.7, abs=0.06)  # independent cues
    assert set(plans["color"]) == set(cfg.colors)  # a conflicting colour is another class's
    assert set(cfg.classes).isdisjoint(SyntheticScenesConfig().classes)


def test_three_cue_scenes_test_split_covers_every_cell_and_flags_the_colour(tmp_path):
    cfg = ThreeCueScenesConfig(n_train=30, n_val=6, n_test_per_cell=1, image_size=32)
    manifest = load_manifest(make_synthetic_scenes(tmp_path, cfg))
    test = manifest[manifest["split"] == "test"]
    cells = Counter(zip(test["label"], test["attr_background"], test["attr_coobject"], test["attr_color"]))
    assert cells == dict.fromkeys(itertools.product(cfg.classes, cfg.backgrounds, cfg.coobjects, cfg.colors), 1)
    aligned = manifest["attr_color"] == manifest["label"].map(lambda c: SCENE_CLASSES[c].color)
    assert (manifest["attr_color_aligned"] == np.where(aligned, "1", "0")).all()
    info = json.loads((tmp_path / "benchmark.json").read_text())
    assert (info["benchmark"], info["group_key"]) == ("three-cue-scenes", "label/background/coobject/color")
    assert info["scene"]["fish"]["color"] == "orange"


def test_synthetic_scenes_names_no_colour_shortcut(small_dataset, manifest):
    info = json.loads((small_dataset.parent / "benchmark.json").read_text())
    assert all("color" not in aligned for aligned in info["scene"].values())
    assert "attr_color_aligned" not in manifest.columns
