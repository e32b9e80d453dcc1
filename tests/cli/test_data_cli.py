import pandas as pd
from typer.testing import CliRunner

from mavias.cli.data import app
from mavias.core.manifest import load_manifest
from mavias.core.synthetic import BENCHMARKS


def test_make_synthetic_scenes_passes_options_to_the_config(tmp_path):
    args = ["make", "synthetic-scenes", "--out", str(tmp_path), "--seed", "3", "--n-train", "6", "--n-val", "3",
            "--n-test-per-cell", "1", "--image-size", "32", "--classes", "car, fish,house"]
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
    rejected = runner.invoke(app, ["make", "two-moons-3d", "--out", str(tmp_path), "--x3-align", "2"])
    assert rejected.exit_code != 0


def test_registry_names_every_benchmark():
    assert set(BENCHMARKS) == {"synthetic-scenes", "shape-colours", "shape-textures", "digit-backgrounds", "two-moons-3d"}
    for benchmark in BENCHMARKS.values():
        benchmark.config()  # defaults are valid


def test_make_shape_textures_passes_options(tmp_path):
    args = ["make", "shape-textures", "--out", str(tmp_path), "--n-train", "24", "--n-val", "12",
            "--n-test-per-cell", "1", "--image-size", "16", "--bias-align", "0.9"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = load_manifest(tmp_path / "manifest.parquet")
    assert manifest["split"].value_counts().to_dict() == {"train": 24, "val": 12, "test": 144}
