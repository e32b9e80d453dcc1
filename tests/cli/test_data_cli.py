import pandas as pd
import pytest
from typer.testing import CliRunner

from mavias.cli import app as root
from mavias.cli.data import app
from mavias.core.manifest import load_manifest
from mavias.core.synthetic import BENCHMARKS


def test_make_synthetic_scenes_passes_options_to_the_config(tmp_path):
    args = ["make", "synthetic-scenes", "--out", str(tmp_path), "--seed", "3", "--n-train", "6", "--n-val", "3",
            "--n-test-per-cell", "1", "--image-size", "32", "--classes", "car, fish,house", "--tags", "oracle",
            "--relevance", "oracle"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = load_manifest(tmp_path / "manifest.parquet")
    assert sorted(manifest["label"].unique()) == ["car", "fish", "house"]
    assert len(manifest) == 6 + 3 + 27


def test_make_two_moons_and_reject_invalid_options(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["make", "two-moons-3d", "--out", str(tmp_path), "--n-test", "40"])
    assert result.exit_code == 0, result.output
    assert (pd.read_parquet(tmp_path / "features.parquet")["split"] == "test").sum() == 40
    rejected = runner.invoke(root, ["data", "make", "two-moons-3d", "--out", str(tmp_path), "--x3-align", "2"])
    assert rejected.exit_code == 2 and "Traceback" not in rejected.output
    assert "invalid two-moons-3d settings: --x3-align: Input should be less than or equal to 1 (got 2.0)" in (
        rejected.output)


def test_registry_names_every_benchmark():
    assert set(BENCHMARKS) == {"synthetic-scenes", "three-cue-scenes", "shape-colours", "shape-textures",
                               "digit-backgrounds", "two-moons-3d"}
    for benchmark in BENCHMARKS.values():
        benchmark.config()  # defaults are valid


def test_make_three_cue_scenes_passes_the_colour_rate_and_synthetic_scenes_refuses_it(tmp_path):
    args = ["make", "three-cue-scenes", "--out", str(tmp_path), "--n-train", "30", "--n-val", "6",
            "--n-test-per-cell", "1", "--image-size", "32", "--color-align", "1", "--tags", "oracle",
            "--relevance", "oracle"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    train = load_manifest(tmp_path / "manifest.parquet").query("split == 'train'")
    assert (train["attr_color_aligned"] == "1").all()
    refused = CliRunner().invoke(app, ["make", "synthetic-scenes", "--out", str(tmp_path / "s"), "--color-align", "1"])
    assert refused.exit_code != 0
    assert "--color-align is an option of three-cue-scenes" in refused.output


def test_make_shape_textures_passes_options(tmp_path):
    args = ["make", "shape-textures", "--out", str(tmp_path), "--n-train", "24", "--n-val", "12",
            "--n-test-per-cell", "1", "--image-size", "16", "--bias-align", "0.9", "--tags", "oracle",
            "--relevance", "oracle"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = load_manifest(tmp_path / "manifest.parquet")
    assert manifest["split"].value_counts().to_dict() == {"train": 24, "val": 12, "test": 144}


def test_oracle_sources_keep_the_generators_tags_and_the_truth_apart(tmp_path):
    args = ["make", "shape-colours", "--out", str(tmp_path), "--n-train", "20", "--n-val", "10",
            "--n-test-per-cell", "1", "--image-size", "16", "--tags", "oracle", "--relevance", "oracle"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "tags: the generator's own attributes (oracle)" in result.output
    assert "relevance: oracle, precision 1.00 / recall 1.00" in result.output
    manifest, truth = load_manifest(tmp_path / "manifest.parquet"), load_manifest(tmp_path / "truth" / "manifest.parquet", check_files=False)
    assert [list(t) for t in manifest["tags"]] == [list(t) for t in truth["tags"]]
    assert pd.read_parquet(tmp_path / "relevance.parquet").equals(pd.read_parquet(tmp_path / "truth" / "relevance.parquet"))


@pytest.mark.parametrize(("args", "message"), [
    (["shape-colours", "--relevance", "nope"], "--relevance nope is neither judge, oracle nor a file"),
    (["shape-colours", "--tags", "clip"], "--tags 'clip' is not a tag source"),
])
def test_a_wrong_source_is_one_line(tmp_path, args, message):
    result = CliRunner().invoke(root, ["data", "make", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert message in " ".join(result.output.split())


def test_a_folder_of_loose_images_says_where_they_belong(tmp_path):
    from mavias.core.datasets.generate import write_imagefolder

    folder = write_imagefolder(tmp_path / "photos", {"cat": 2})
    for image in list((folder / "cat").iterdir()):
        image.rename(folder / image.name)
    result = CliRunner().invoke(root, ["data", "import", "imagefolder", str(folder), "--out", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert ("every image was quarantined (most often: not inside a <class>/ folder: put each class's images in "
            "ROOT/<class>/, 2 of them)") in " ".join(result.output.split())
