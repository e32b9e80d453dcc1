"""Prepared data on disk: everything a training step reads comes back equal, and a file holding code is refused
with a message instead of being run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from mavias.core.encode import EmbeddingStore
from mavias.core.relevance import RELEVANCE_COLUMNS
from mavias.core.train.config import TrainConfig
from mavias.core.train.prepare import prepare_image_data
from mavias.core.train.prepared_io import UnreadablePrepared, load_prepared, save_prepared
from tests.core.encode.test_store import CountingEncoder
from tests.support.s3server import write_local_partition

CLASSES = ["bird", "boat", "car"]


def _prepared(tmp_path: Path, augment: bool):  # noqa: ANN202
    folder = tmp_path / "p1"
    manifest = write_local_partition(folder, CLASSES * 6, corrupt=1)
    manifest["split"] = ["train"] * 12 + ["val"] * 6
    manifest["tags"] = [["sky", "water"] if i % 2 else ["sky"] for i in range(len(manifest))]
    manifest.to_parquet(folder / "manifest.parquet")
    relevance = pd.DataFrame([(c, t, False, "offline") for c in CLASSES for t in ("sky", "water")],
                             columns=RELEVANCE_COLUMNS)
    config = TrainConfig(image_size=8, preprocessing={"augment": augment, "resize": 8})
    return prepare_image_data(folder / "manifest.parquet", relevance=relevance, encoder=CountingEncoder(),
                              store_dir=EmbeddingStore(tmp_path / "store").root, config=config, progress=False)


@pytest.mark.parametrize("augment", [False, True])
def test_a_saved_split_comes_back_equal_without_decoding_an_image_again(tmp_path: Path, augment: bool) -> None:
    data = _prepared(tmp_path, augment)
    path = save_prepared(data, tmp_path / "prepared-data.pt")
    for image in (tmp_path / "p1" / "images").iterdir():
        image.unlink()  # anything decoded on load would fail now
    loaded = load_prepared(path)
    assert loaded.classes == data.classes and loaded.config == data.config and loaded.image_notes == data.image_notes
    pd.testing.assert_frame_equal(loaded.quarantined, data.quarantined.reset_index(drop=True))
    for name, split in data.splits.items():
        again = loaded[name]
        pd.testing.assert_frame_equal(again.frame, split.frame)
        assert torch.equal(again.labels, split.labels) and torch.equal(again.embeddings, split.embeddings)
        assert again.augmented == split.augmented and len(again) == len(split)
        assert again.inputs[0].shape == split.inputs[0].shape and again.inputs[0].dtype == torch.uint8
        if not split.augmented:
            assert torch.equal(again.inputs[3], split.inputs[3])
    assert loaded["train"].augmented == augment


class Payload:
    def __reduce__(self):  # noqa: ANN204 - what a planted pickle does on load
        return (Path.touch, (Path("/tmp/mavias-pickle-ran"),))


def test_a_file_holding_code_is_refused_and_never_run(tmp_path: Path) -> None:
    Path("/tmp/mavias-pickle-ran").unlink(missing_ok=True)
    torch.save({"format": "mavias-prepared-2", "splits": Payload()}, tmp_path / "planted.pt")
    with pytest.raises(UnreadablePrepared, match="delete it and the data is prepared again"):
        load_prepared(tmp_path / "planted.pt")
    assert not Path("/tmp/mavias-pickle-ran").exists()
    torch.save({"format": "another"}, tmp_path / "other.pt")
    with pytest.raises(UnreadablePrepared, match="not prepared data of format"):
        load_prepared(tmp_path / "other.pt")


@pytest.mark.parametrize("keep", [False, True])
def test_another_class_s_name_reaches_the_bias_path_only_as_the_paper_presets_ask(tmp_path: Path, keep: bool) -> None:
    folder = tmp_path / "p1"
    manifest = write_local_partition(folder, CLASSES * 4)
    manifest["split"] = ["train"] * 9 + ["val"] * 3
    manifest["tags"] = [["sky", "car"]] * len(manifest)
    manifest.to_parquet(folder / "manifest.parquet")
    relevance = pd.DataFrame([(c, t, c == t, "offline") for c in CLASSES for t in ("sky", "car")],
                             columns=RELEVANCE_COLUMNS)
    config = TrainConfig(image_size=8, preprocessing={"augment": False, "resize": 8},
                         mavias={"keep_class_name_tags": keep})
    data = prepare_image_data(folder / "manifest.parquet", relevance=relevance, encoder=CountingEncoder(),
                              store_dir=EmbeddingStore(tmp_path / "store").root, config=config, progress=False)
    frame = data["train"].frame
    birds = frame.loc[frame["label"] == "bird", "irrelevant_tags"].map(list)
    assert birds.tolist() == [["car", "sky"] if keep else ["sky"]] * len(birds)
