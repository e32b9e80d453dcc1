"""A tags sidecar joined to an import: CSV or Parquet, matched by the image's path relative to the folder."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets import import_imagefolder
from mavias.core.datasets.detect import import_path
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.datasets.sidecar import attach_tags, read_sidecar
from mavias.core.manifest import load_manifest
from mavias.errors import UserError


@pytest.fixture
def root(tmp_path):
    return write_imagefolder(tmp_path / "photos", {"cat": 3, "dog": 3})


def test_a_csv_sidecar_becomes_the_manifest_tags(root, tmp_path):
    (tmp_path / "tags.csv").write_text("image,tags\ncat/0000.jpg,Sofa; indoor\n./cat/0001.png,grass\n"
                                       "cat/0001.png,sky\ndog/0000.jpg,\n")
    result = CliRunner().invoke(app, ["data", "import", "imagefolder", str(root), "--out", str(tmp_path / "ds"),
                                      "--tags", str(tmp_path / "tags.csv")], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    manifest = load_manifest(tmp_path / "ds" / "manifest.parquet")
    tags = dict(zip(manifest["uri"].str.removeprefix(f"{root.resolve()}/"), manifest["tags"]))
    assert tags["cat/0000.jpg"] == ["indoor", "sofa"] and tags["cat/0001.png"] == ["grass", "sky"]
    assert tags["dog/0000.jpg"] == [] and tags["dog/0002.jpg"] == []
    assert "3 imported image(s) are not in" in result.output  # cat/0002, dog/0001, dog/0002


def test_a_parquet_sidecar_with_a_list_column(root, tmp_path):
    pd.DataFrame({"image": ["cat/0000.jpg", "dog/0001.png", "bird/0000.jpg"],
                  "tags": [["sofa", "lamp"], ["grass"], ["sky"]]}).to_parquet(tmp_path / "tags.parquet")
    result, warnings = attach_tags(import_imagefolder(root, progress=False), tmp_path / "tags.parquet",
                                   str(root.resolve()))
    assert sorted(map(sorted, result.manifest["tags"])) == [[], [], [], [], ["grass"], ["lamp", "sofa"]]
    assert any("1 image(s) named in" in w and "bird/0000.jpg" in w for w in warnings)


def test_a_sidecar_that_matches_nothing_says_how_names_look(root, tmp_path):
    (tmp_path / "tags.csv").write_text(f"image,tags\n{root}/cat/0000.jpg,sofa\n")
    with pytest.raises(UserError, match="relative to the imported folder"):
        attach_tags(import_imagefolder(root, progress=False), tmp_path / "tags.csv", str(root.resolve()))


@pytest.mark.parametrize(("content", "expect"), [("picture,tags\na.png,b\n", "lacks the column\\(s\\) image"),
                                                 (None, "does not exist")])
def test_unreadable_sidecars(tmp_path, content, expect):
    path = tmp_path / "tags.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=expect):
        read_sidecar(path)


def test_a_manifest_and_a_split_folder_are_recognised(root, tmp_path):
    split_root = write_imagefolder(tmp_path / "split", {"cat": 2, "dog": 2}, splits=("train", "val", "test"))
    result, _ = import_path(split_root)
    assert set(result.manifest["split"]) == {"train", "val", "test"}
    (tmp_path / "m.csv").write_text("sample_id,uri,label,split\na,photos/cat/0000.jpg,cat,train\n")
    result, base = import_path(tmp_path / "m.csv")
    assert result.manifest["uri"][0] == str((root / "cat" / "0000.jpg").resolve()) and base == str(tmp_path.resolve())
