import errno
import io

import pandas as pd
import pytest
from PIL import Image

from mavias.core.manifest import ManifestError, content_sample_id, load_manifest, quarantine_undecodable, save_manifest
from mavias.core.manifest.quarantine import decode_problem, image_problem


def _image(path, color=(255, 0, 0)) -> bytes:
    Image.new("RGB", (8, 8), color).save(path)
    return path.read_bytes()


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "img").mkdir()
    rows = []
    for i, (label, split) in enumerate([("cat", "train"), ("dog", "val"), ("cat", "test")]):
        data = _image(tmp_path / "img" / f"{i}.png", (i * 60, 0, 0))
        rows.append({"sample_id": content_sample_id(data), "uri": f"img/{i}.png", "label": label, "split": split,
                     "tags": ["Grass", "sky ", "grass"], "attr_bg": "field"})
    return tmp_path, pd.DataFrame(rows)


def test_sample_id_is_derived_from_content_not_position(tmp_path):
    a = _image(tmp_path / "a.png", (1, 2, 3))
    assert content_sample_id(a) == content_sample_id(bytes(a))
    assert content_sample_id(a) != content_sample_id(_image(tmp_path / "b.png", (3, 2, 1)))
    assert len(content_sample_id(a)) == 16


def test_round_trip_normalises_tags(folder):
    root, df = folder
    save_manifest(df, root / "manifest.parquet")
    loaded = load_manifest(root / "manifest.parquet")
    assert loaded["tags"].iloc[0] == ["grass", "sky"]
    assert list(loaded["sample_id"]) == list(df["sample_id"])


def test_csv_manifest_with_pipe_separated_tags(folder):
    root, df = folder
    df.assign(tags=["a|b", "", "c"]).to_csv(root / "m.csv", index=False)
    assert load_manifest(root / "m.csv")["tags"].tolist() == [["a", "b"], [], ["c"]]
    df.assign(tags=["a;b", "", "c"]).to_csv(root / "m.csv", index=False)  # the sidecar's separator, by mistake
    with pytest.raises(ManifestError, match="1 row.s. separate their tags with ';' .e.g. 'a;b'.: a manifest CSV"):
        load_manifest(root / "m.csv")


def test_a_blank_text_tags_cell_is_no_tags(folder):
    root, df = folder
    df.assign(tags=["", " ", ""]).to_parquet(root / "m.parquet")
    assert load_manifest(root / "m.parquet")["tags"].tolist() == [[], [], []]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.assign(split=["train", "holdout", "test"]), "unknown split"),
        (lambda d: d.assign(sample_id=[d.sample_id[0]] * 3), "share a sample_id"),
        (lambda d: d.assign(uri=["img/0.png", "img/missing.png", "img/2.png"]), "not found"),
        (lambda d: d.drop(columns="label"), "missing required column"),
        (lambda d: d.assign(label=["cat", " ", "dog"]), "empty 'label'"),
        (lambda d: d.iloc[0:0], "no rows"),
        (lambda d: d.assign(tags=["grass;sky", "", "sky"]), r"2 row\(s\) hold their tags as text \(e.g. 'grass;sky'\)"),
        (lambda d: d.assign(tags=[["salt, pepper"], [], ["sky"]]), r"1 tag\(s\) hold a comma \(e.g. 'salt, pepper'\)"),
    ],
)
def test_invalid_manifests_are_rejected_with_a_clear_error(folder, change, message):
    root, df = folder
    change(df).to_parquet(root / "bad.parquet")
    with pytest.raises(ManifestError, match=message):
        load_manifest(root / "bad.parquet")


def test_all_problems_are_listed_at_once(folder):
    root, df = folder
    df.assign(split=["x", "val", "test"], sample_id=["same"] * 3).to_parquet(root / "bad.parquet")
    with pytest.raises(ManifestError) as err:
        load_manifest(root / "bad.parquet")
    assert "unknown split" in str(err.value) and "share a sample_id" in str(err.value)


def test_undecodable_images_are_quarantined_with_a_reason(folder):
    root, df = folder
    (root / "img" / "1.png").write_bytes(b"not a png at all")
    ok, quarantined = quarantine_undecodable(df, root, root / "quarantine.csv")
    assert list(ok["uri"]) == ["img/0.png", "img/2.png"]
    assert quarantined["uri"].tolist() == ["img/1.png"]
    assert "cannot decode" in quarantined["reason"].iloc[0]
    listed = pd.read_csv(root / "quarantine.csv")
    assert listed["sample_id"].tolist() == [df["sample_id"].iloc[1]]
    # re-running does not duplicate the quarantine list
    quarantine_undecodable(df, root, root / "quarantine.csv")
    assert len(pd.read_csv(root / "quarantine.csv")) == 1


def test_an_image_too_large_to_decode_is_quarantined_from_its_header_alone(tmp_path):
    Image.new("1", (12_000, 12_000)).save(tmp_path / "bomb.png")  # a small file of 144 million pixels
    assert (tmp_path / "bomb.png").stat().st_size < 1_000_000
    assert decode_problem(tmp_path / "bomb.png").startswith("too large: ")  # whatever limit PIL runs with here


class _FailingDisk(io.BytesIO):
    """A file whose reads fail as a failing disk's do."""

    def read(self, *args):  # noqa: ANN002
        raise OSError(errno.EIO, "Input/output error")


def test_a_machine_fault_while_reading_is_raised_but_a_folder_in_place_of_an_image_is_quarantined(tmp_path):
    with pytest.raises(OSError, match="Input/output error"):
        image_problem(_FailingDisk())
    (tmp_path / "folder.png").mkdir()
    assert decode_problem(tmp_path / "folder.png").startswith("cannot decode: IsADirectoryError")


@pytest.mark.parametrize(("labels", "expect"), [
    (["cat ", "dog"], "'cat ' have spaces at the start or end"),
    (["Cat", "cat", "dog"], "'Cat' and 'cat' differ only in case"),
])
def test_labels_that_would_split_one_class_in_two_are_refused(labels, expect):
    n = len(labels)
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "uri": [f"{i}.png" for i in range(n)],
                       "label": labels, "split": ["train"] * n})
    with pytest.raises(ManifestError, match=expect):
        save_manifest(df, "unused.parquet")
