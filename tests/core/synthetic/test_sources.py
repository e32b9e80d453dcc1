"""A benchmark as a user meets it: tags from its own tagger, relevance from the judge, the truth kept apart; the
leak stress test; variants beside the images; a user's table or checkpoint checked before use."""

import json
import shutil

import pandas as pd
import pytest

from mavias.core.manifest import load_manifest
from mavias.core.relevance import load_relevance, save_relevance
from mavias.core.synthetic import Sources, make_benchmark
from mavias.core.synthetic import tagger as synthetic_tagger
from mavias.core.synthetic.shapes import ShapesConfig, tagging_samples, vocabulary
from mavias.core.synthetic.sources import apply_sources, leak_defining_tags
from mavias.core.synthetic.tagger import TAGS_THRESHOLD, TRAINING
from mavias.core.tagging.base import read_tags
from mavias.errors import UserError

CFG = ShapesConfig(n_classes=3, n_train=60, n_val=30, n_test_per_cell=2, image_size=24)
LOW = Sources(tagger_quality="low")


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shapes")
    return folder, make_benchmark("shape-colours", folder, CFG, LOW)


def test_tags_come_from_the_tagger_and_relevance_from_the_judge(benchmark):
    folder, manifest_path = benchmark
    manifest = load_manifest(manifest_path)
    scored = read_tags(folder / "tags.parquet")
    assert set(scored["sample_id"]) <= set(manifest["sample_id"])
    first = manifest.iloc[0]
    assert list(first["tags"]) == sorted(scored.loc[scored["sample_id"] == first["sample_id"], "tag"])
    oracle = load_manifest(folder / "truth" / "manifest.parquet", check_files=False)
    assert (oracle["sample_id"] == manifest["sample_id"]).all()
    assert any(list(a) != list(b) for a, b in zip(oracle["tags"], manifest["tags"]))  # a tagger, not the generator
    discovery = json.loads((folder / "benchmark.json").read_text())["discovery"]
    assert discovery["tags"]["source"] == "tagger" and discovery["tags"]["mean_f1"] >= 0.5
    quality = json.loads((folder / "tagger" / "low" / "quality.json").read_text())
    assert quality["mean_f1"] == discovery["tags"]["mean_f1"] and quality["tagging_images"] >= 250
    per_tag = pd.DataFrame(discovery["tags"]["per_tag"])  # each tag's quality on the held-out tagging split
    assert set(per_tag.columns) == {"tag", "support", "precision", "recall", "f1"}
    measured = per_tag[per_tag["support"] > 0]
    assert measured["f1"].fillna(0.0).mean() == pytest.approx(discovery["tags"]["mean_f1"])
    assert measured["recall"].between(0, 1).all() and discovery["tags"]["held_out_images"] == quality["held_out_images"]
    relevance, truth = load_relevance(folder / "relevance.parquet"), load_relevance(folder / "truth" / "relevance.parquet")
    assert set(zip(relevance["class"], relevance["tag"])) == set(zip(truth["class"], truth["tag"]))  # every pair
    assert "ground_truth" not in set(relevance["source"]) and set(truth["source"]) == {"ground_truth"}
    assert 0 <= discovery["relevance"]["precision"] <= 1 and discovery["relevance"]["source"] == "judge"


def test_a_variant_shares_the_images_and_the_tagger(benchmark, tmp_path):
    folder, _ = benchmark
    variant = tmp_path / "oracle"
    variant.mkdir()
    path = apply_sources(folder, variant, name="shape-colours", cfg=CFG, samples=tagging_samples,
                         sources=Sources(tags="oracle", relevance="oracle", leak=1))
    manifest = load_manifest(path)
    assert manifest["uri"].map(lambda uri: uri.startswith(str(folder.resolve()))).all()
    assert not (variant / "images").exists()
    relevance = load_relevance(variant / "relevance.parquet")
    assert set(relevance.loc[relevance["source"] == "leak", "class"]) == set(CFG.classes)  # one per class
    assert json.loads((variant / "benchmark.json").read_text())["discovery"]["relevance"]["recall"] < 1.0


def test_the_tags_are_written_and_scored_at_the_tags_cut_off(benchmark, tmp_path, monkeypatch):
    folder, _ = benchmark
    quality = json.loads((folder / "tagger" / "low" / "quality.json").read_text())
    scored = read_tags(folder / "tags.parquet")
    assert quality["threshold"] == TAGS_THRESHOLD < TRAINING.threshold and quality["tagger_id"].endswith(":t0.3")
    assert json.loads((folder / "benchmark.json").read_text())["discovery"]["tags"]["threshold"] == TAGS_THRESHOLD
    assert scored["score"].min() >= TAGS_THRESHOLD and (scored["score"] < TRAINING.threshold).any()
    shutil.copytree(folder / "tagger", tmp_path / "tagger")
    checkpoint = (tmp_path / "tagger" / "low" / "tagger.pt").stat().st_mtime_ns
    monkeypatch.setattr(synthetic_tagger, "TAGS_THRESHOLD", 0.5)  # another cut-off: scored again, not retrained
    tagger, summary = synthetic_tagger.benchmark_tagger("shape-colours", CFG, tagging_samples, vocabulary(CFG),
                                                        tmp_path, "low")
    assert (tmp_path / "tagger" / "low" / "tagger.pt").stat().st_mtime_ns == checkpoint
    assert summary["threshold"] == 0.5 and tagger.tagger_id == quality["tagger_id"].replace(":t0.3", ":t0.5")
    assert summary["tagging_images"] == quality["tagging_images"]
    recall = {row["tag"]: row["recall"] for row in quality["per_tag"] if row["support"]}
    assert all(row["recall"] <= recall[row["tag"]] for row in summary["per_tag"] if row["support"])


def test_leak_turns_the_most_class_specific_defining_tag_irrelevant():
    truth = pd.DataFrame([("car", "wheel", True), ("car", "door", True), ("car", "road", False),
                          ("bus", "door", True), ("bus", "wheel", False)],
                         columns=["class", "tag", "relevant"]).assign(source="truth")
    manifest = pd.DataFrame({"label": ["car"] * 3 + ["bus"] * 3, "split": "train",
                             "tags": [["wheel", "door"], ["wheel", "door"], ["road", "door"], *[["door"]] * 3]})
    leaked = leak_defining_tags(truth, truth, manifest, 1).set_index(["class", "tag"])
    # car: "door" is on every car image but as often on bus images (3/3 x 3/6 = 0.5 < wheel's 2/3 x 2/2)
    assert not leaked.loc[("car", "wheel"), "relevant"] and leaked.loc[("car", "wheel"), "source"] == "leak"
    assert leaked.loc[("car", "door"), "relevant"]
    assert not leaked.loc[("bus", "door"), "relevant"]  # the bus's only defining tag


def test_a_users_table_or_checkpoint_that_does_not_fit_is_one_line(benchmark, tmp_path):
    folder, _ = benchmark
    truth = load_relevance(folder / "truth" / "relevance.parquet")
    stranger = pd.concat([truth, pd.DataFrame([("circle", "zebra", False, "me")], columns=truth.columns)])
    save_relevance(stranger, tmp_path / "mine.parquet")
    with pytest.raises(UserError, match="does not have"):
        apply_sources(folder, tmp_path, name="shape-colours", cfg=CFG, samples=tagging_samples,
                      sources=Sources(relevance=tmp_path / "mine.parquet", tagger_quality="low"))
    (tmp_path / "junk.pt").write_bytes(b"x")
    with pytest.raises(UserError, match="cannot be read as a tagger checkpoint"):
        apply_sources(folder, tmp_path, name="shape-colours", cfg=CFG, samples=tagging_samples,
                      sources=Sources(tagger_checkpoint=tmp_path / "junk.pt"))


def test_two_moons_has_no_images_to_tag(tmp_path):
    with pytest.raises(UserError, match="two-moons-3d has no images"):
        make_benchmark("two-moons-3d", tmp_path, sources=Sources())


def test_decisions_of_another_judge_version_live_in_another_folder(monkeypatch):
    from mavias.core.judging import offline

    before = Sources().slug
    monkeypatch.setattr(offline, "JUDGE_VERSION", "offline-v0")
    assert Sources().slug != before and Sources(relevance="oracle").slug == "tagger-default_oracle"


def test_a_relevance_table_of_the_users_gets_a_folder_named_by_its_contents(tmp_path):
    """`mavias bench … --relevance TABLE` keeps its runs apart from the judge's and from another table's."""
    table = tmp_path / "relevance.csv"
    table.write_text("class,tag,relevant\ncircle,red,false\n")
    first = Sources(relevance=table).slug
    assert first.startswith("tagger-default_table-") and first != Sources().slug
    assert Sources(relevance=table).slug == first
    table.write_text("class,tag,relevant\ncircle,red,true\n")
    assert Sources(relevance=table).slug != first
