"""Every importer on fixture trees in the published layouts, including malformed variants."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets import (
    SplitOptions,
    import_celeba,
    import_imagefolder,
    import_imagenet9,
    import_urbancars,
    import_waterbirds,
    write_import,
)
from mavias.core.datasets.base import stratified_split
from mavias.core.datasets.celeba import biased_subset
from mavias.core.datasets.generate import write_imagefolder, write_waterbirds
from mavias.core.datasets.imagenet9 import VARIANTS
from mavias.core.manifest import load_manifest, read_dataset_info
from mavias.errors import UserError
from tests.core.datasets.layout_trees import IN9_CLASSES, celeba_cells, write_celeba, write_imagenet9, write_urbancars


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _sha16(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def test_imagefolder_stratified_split_is_seeded_and_content_addressed(tmp_path):
    root = write_imagefolder(tmp_path / "data", {"cat": 10, "dog": 20})
    before = _snapshot(root)
    first = import_imagefolder(root, SplitOptions(seed=3, val=0.2, test=0.1), progress=False)
    again = import_imagefolder(root, SplitOptions(seed=3, val=0.2, test=0.1), progress=False)
    other = import_imagefolder(root, SplitOptions(seed=4, val=0.2, test=0.1), progress=False)
    m = first.manifest
    assert len(m) == 30 and first.quarantined.empty
    assert all(m["sample_id"] == [_sha16(u) for u in m["uri"]])
    assert all(Path(u).is_absolute() and Path(u).exists() for u in m["uri"])
    counts = m.groupby(["label", "split"]).size().to_dict()
    assert counts == {("cat", "train"): 7, ("cat", "val"): 2, ("cat", "test"): 1,
                      ("dog", "train"): 14, ("dog", "val"): 4, ("dog", "test"): 2}
    pd.testing.assert_frame_equal(m, again.manifest)
    assert not m.set_index("uri")["split"].equals(other.manifest.set_index("uri")["split"])
    path = write_import(first, tmp_path / "out")
    assert load_manifest(path)["sample_id"].tolist() == m["sample_id"].tolist()
    assert _snapshot(root) == before


def test_imagefolder_split_from_and_quarantine(tmp_path):
    root = write_imagefolder(tmp_path / "data", {"a": 2, "b": 2}, splits=("train", "val", "test"))
    (root / "train" / "a" / "broken.png").write_bytes(b"not a png")
    (root / "stray.jpg").write_bytes((root / "train" / "a" / "0001.png").read_bytes())
    (root / "holdout" / "a").mkdir(parents=True)
    (root / "holdout" / "a" / "x.png").write_bytes(b"")
    (root / "train" / "b" / "notes.txt").write_text("ignored: not an image")
    result = import_imagefolder(root, SplitOptions(split_from=True), progress=False)
    assert result.manifest.groupby("split").size().to_dict() == {"test": 4, "train": 4, "val": 4}
    reasons = dict(zip(result.quarantined["uri"].map(lambda u: Path(u).relative_to(root).as_posix()),
                       result.quarantined["reason"]))
    assert set(reasons) == {"train/a/broken.png", "stray.jpg", "holdout/a/x.png"}
    assert reasons["train/a/broken.png"].startswith("cannot decode")
    assert "not inside" in reasons["stray.jpg"] and "holdout" in reasons["holdout/a/x.png"]


def test_duplicate_content_is_quarantined_not_lost(tmp_path):
    root = write_imagefolder(tmp_path / "data", {"a": 3})
    (root / "a" / "copy.png").write_bytes((root / "a" / "0001.png").read_bytes())
    result = import_imagefolder(root, SplitOptions(val=0.0, test=0.0), progress=False)
    assert len(result.manifest) + len(result.quarantined) == 4
    assert result.quarantined["reason"].str.startswith("same content as").all()


def test_a_folder_without_images_says_what_layout_and_files_it_needs(tmp_path):
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "notes.txt").write_text("not an image")
    with pytest.raises(UserError, match=r"no images found in .*photos: .*photos/<class>/<image>; .*\.jpg"):
        import_imagefolder(tmp_path / "photos", progress=False)


def test_waterbirds_metadata_and_malformed_rows(tmp_path):
    root = write_waterbirds(tmp_path / "waterbird_complete95_forest2water2", 24)
    meta = pd.read_csv(root / "metadata.csv", dtype=str)
    missing, unreadable = meta["img_filename"][0], meta["img_filename"][1]
    os.remove(root / missing)
    (root / unreadable).write_bytes(b"\xff\xd8 truncated jpeg")
    result = import_waterbirds(root, progress=False)
    assert len(result.manifest) == 22 and len(result.quarantined) == 2
    reasons = result.quarantined.set_index("uri")["reason"]
    assert reasons[str(root / missing)] == "file not found"
    assert reasons[str(root / unreadable)].startswith("cannot decode")
    m = result.manifest.set_index("uri")
    for row in meta.itertuples():
        if row.img_filename in (missing, unreadable):
            continue
        got = m.loc[str(root / row.img_filename)]
        assert got["label"] == ("waterbird" if row.y == "1" else "landbird")
        assert got["attr_place"] == ("water" if row.place == "1" else "land")
        assert got["split"] == {"0": "train", "1": "val", "2": "test"}[row.split]
    assert result.info.protocol == "closed_set" and result.info.group_attrs == ["attr_place"]


def test_waterbirds_missing_column_is_one_clear_error(tmp_path):
    root = write_waterbirds(tmp_path / "wb", 4)
    meta = pd.read_csv(root / "metadata.csv").drop(columns="place")
    meta.to_csv(root / "metadata.csv", index=False)
    with pytest.raises(UserError, match=r"metadata.csv lacks the column\(s\) place"):
        import_waterbirds(root, progress=False)


def test_waterbirds_bad_codes_are_quarantined(tmp_path):
    root = write_waterbirds(tmp_path / "wb", 8)
    meta = pd.read_csv(root / "metadata.csv", dtype=str)
    meta.loc[0, "split"] = "7"
    meta.to_csv(root / "metadata.csv", index=False)
    result = import_waterbirds(root, progress=False)
    assert len(result.manifest) == 7
    assert result.quarantined["reason"].tolist() == ["metadata: split='7' is not one of ['0', '1', '2']"]


@pytest.mark.parametrize("csv", [False, True])
def test_celeba_txt_and_csv_layouts(tmp_path, csv):
    cells = celeba_cells()
    files = write_celeba(tmp_path / "celeba", cells, csv=csv)
    os.remove(tmp_path / "celeba" / "img_align_celeba" / files[0])
    result = import_celeba(tmp_path / "celeba", progress=False)
    assert len(result.manifest) == len(cells) - 1
    assert result.quarantined["reason"].tolist() == ["file not found"]
    m = result.manifest.assign(name=result.manifest["uri"].map(lambda u: Path(u).name)).set_index("name")
    for f, (blond, male, part) in list(zip(files, cells))[1:]:
        assert m.loc[f, "label"] == ("blond" if blond == 1 else "not_blond")
        assert m.loc[f, "attr_male"] == ("1" if male == 1 else "0")
        assert m.loc[f, "split"] == ("train", "val", "test")[part]
    assert result.info.protocol == "celeba"


def test_celeba_missing_attribute_is_one_clear_error(tmp_path):
    write_celeba(tmp_path / "celeba", celeba_cells(1), names=["Blond_Hair", "Young"])
    with pytest.raises(UserError, match="lacks the column.*Male"):
        import_celeba(tmp_path / "celeba", progress=False)


def test_biased_celeba_subset_rule():
    # 100 blond (95 female aligned, 5 male) and 100 not blond (50 male aligned, 50 female) training rows
    rows = pd.DataFrame({
        "label": ["blond"] * 100 + ["not_blond"] * 100 + ["blond"] * 4,
        "attr_male": ["0"] * 95 + ["1"] * 5 + ["1"] * 50 + ["0"] * 50 + ["1"] * 4,
        "split": ["train"] * 200 + ["test"] * 4,
    }).assign(problem=None, uri=lambda d: [f"{i}.jpg" for i in range(len(d))])
    kept = biased_subset(rows, 0.9, seed=0)
    train = kept[kept["split"] == "train"]
    cells = train.groupby(["label", "attr_male"]).size().to_dict()
    assert cells == {("blond", "0"): 95, ("blond", "1"): 5, ("not_blond", "1"): 50, ("not_blond", "0"): 5}
    assert (kept["split"] == "test").sum() == 4


def test_urbancars_folders_become_attributes(tmp_path):
    root = write_urbancars(tmp_path / "urbancars")
    (root / "bg-0.5_co_occur_obj-0.5" / "test" / "obj-urban_bg-space_co_occur_obj-urban").mkdir()
    (root / "bg-0.5_co_occur_obj-0.5" / "test" / "obj-urban_bg-space_co_occur_obj-urban" / "000.jpg").write_bytes(b"x")
    result = import_urbancars(root, progress=False)
    m = result.manifest
    assert m.groupby("split").size().to_dict() == {"test": 16, "train": 16, "val": 16}
    row = m[m["uri"].str.contains("obj-urban_bg-country_co_occur_obj-urban")].iloc[0]
    assert (row["label"], row["attr_bg"], row["attr_co_occur_obj"]) == ("urban", "country", "urban")
    assert (row["attr_bg_aligned"], row["attr_coobj_aligned"]) == ("0", "1")
    assert result.quarantined["reason"].str.contains("not inside an obj-").all() and len(result.quarantined) == 1


def test_imagenet9_variants_are_named_evaluation_splits(tmp_path):
    root = write_imagenet9(tmp_path / "in9", VARIANTS)
    train = write_imagefolder(tmp_path / "in9l", {c: 2 for c in IN9_CLASSES}, splits=("train", "val"), seed=9)
    result = import_imagenet9(root, train_root=train, progress=False)
    assert result.info.eval_splits == list(VARIANTS)
    assert result.manifest.groupby("split").size().to_dict() == {**{v: 4 for v in VARIANTS}, "train": 4, "val": 4}
    path = write_import(result, tmp_path / "out")
    assert read_dataset_info(path).protocol == "imagenet9"
    assert set(load_manifest(path)["split"]) == {*VARIANTS, "train", "val"}
    (tmp_path / "out" / "dataset.json").unlink()
    with pytest.raises(ValueError, match="unknown split"):
        load_manifest(path)


def test_cli_imports_and_refuses_out_inside_the_data(tmp_path):
    root = write_imagefolder(tmp_path / "data", {"a": 3, "b": 3})
    runner = CliRunner()
    ok = runner.invoke(app, ["data", "import", "imagefolder", str(root), "--out", str(tmp_path / "out")])
    assert ok.exit_code == 0, ok.output
    assert "6 images" in ok.output
    assert (tmp_path / "out" / "quarantine.csv").read_text().strip() == "sample_id,uri,reason"
    bad = runner.invoke(app, ["data", "import", "imagefolder", str(root), "--out", str(root / "manifest")])
    assert bad.exit_code == 2 and "inside the data folder" in bad.output, bad.output
    assert not (root / "manifest").exists()


@pytest.mark.parametrize(("size", "expected"), [(1, {"train": 1}), (2, {"train": 1, "val": 1}),
                                                (3, {"train": 1, "val": 1, "test": 1}),
                                                (4, {"train": 2, "val": 1, "test": 1})])
def test_a_small_class_holds_one_image_back_for_validation_and_one_for_the_test(size, expected):
    labels = pd.Series(["cat"] * size + ["dog"] * 30)
    split = stratified_split(labels, seed=0, val=0.1, test=0.1)
    assert split[labels == "cat"].value_counts().to_dict() == expected
    assert split[labels == "dog"].value_counts().to_dict() == {"train": 24, "val": 3, "test": 3}  # as before
