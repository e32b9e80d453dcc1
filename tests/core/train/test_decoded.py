"""Decoded images on disk: a partition's images are decoded once for every dataset they join, a replaced image is
decoded again, a saved dataset reads its images from the store, and a damaged store file costs a decode, not a
night."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from PIL import Image

from mavias.core.manifest import quarantine
from mavias.core.relevance import RELEVANCE_COLUMNS
from mavias.core.train import decoded
from mavias.core.train.config import TrainConfig
from mavias.core.train.decoded import DecodedStore, transform_key
from mavias.core.train.prepare import prepare_image_data
from mavias.core.train.prepared_io import load_prepared, save_prepared
from mavias.core.train.transforms import eval_transform
from tests.support.s3server import write_local_partition

CLASSES = ["bird", "boat", "car"]
RELEVANCE = pd.DataFrame(columns=RELEVANCE_COLUMNS)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every image the store decodes (the real decoder, counted)."""
    seen: list[Path] = []
    real = decoded.load_transformed

    def counted(path, transform):  # noqa: ANN001, ANN202
        seen.append(Path(path))
        return real(path, transform)

    monkeypatch.setattr(decoded, "load_transformed", counted)
    return seen


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every image decoded to know whether it decodes (the quarantine check, counted)."""
    seen: list[Path] = []
    real = quarantine.decode_problem

    def counted(path):  # noqa: ANN001, ANN202
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(quarantine, "decode_problem", counted)
    return seen


def _partition(root: Path, name: str, n: int) -> pd.DataFrame:
    folder = root / "partitions" / name
    manifest = write_local_partition(folder, (CLASSES * n)[:n])
    manifest["split"] = ["train"] * (n - n // 3) + ["val"] * (n // 3)
    manifest["tags"] = [[] for _ in range(n)]
    return manifest.assign(uri=[str(folder / uri) for uri in manifest["uri"]])


def _prepare(root: Path, rows: pd.DataFrame, store: DecodedStore | None, augment: bool = False):  # noqa: ANN202
    (root / "datasets").mkdir(exist_ok=True)
    path = root / "datasets" / f"{len(rows)}.parquet"
    rows.to_parquet(path, index=False)
    config = TrainConfig(image_size=8, preprocessing={"augment": augment, "resize": 8})
    return prepare_image_data(path, relevance=RELEVANCE, encoder=None, store_dir=None, config=config, progress=False,
                              decoded=store)


def test_a_partition_is_decoded_once_for_every_dataset_it_joins(tmp_path: Path, decodes: list[Path],
                                                                 checks: list[Path]) -> None:
    store = DecodedStore(tmp_path / "decoded", tmp_path)
    first, second = _partition(tmp_path, "p1", 9), _partition(tmp_path, "p2", 6)
    _prepare(tmp_path, first, store)
    assert len(decodes) == 9 and len(checks) == 9
    decodes.clear()
    checks.clear()
    both = _prepare(tmp_path, pd.concat([first, second], ignore_index=True), store)
    assert sorted({path.parent.parent.name for path in decodes}) == ["p2"] and len(decodes) == 6
    assert sorted({path.parent.parent.name for path in checks}) == ["p2"] and len(checks) == 6  # p1's are known
    key = transform_key(eval_transform(TrainConfig(image_size=8, preprocessing={"resize": 8})))
    assert sorted(p.name for p in (tmp_path / "decoded" / key).iterdir()) == ["partitions__p1.pt", "partitions__p2.pt"]
    plain = _prepare(tmp_path, pd.concat([first, second], ignore_index=True), None)  # decoded without a store
    for name in ("train", "val"):
        assert torch.equal(both[name].inputs.cache, plain[name].inputs.cache)


def test_a_replaced_image_is_decoded_again(tmp_path: Path, decodes: list[Path]) -> None:
    store = DecodedStore(tmp_path / "decoded", tmp_path)
    rows = _partition(tmp_path, "p1", 6)
    _prepare(tmp_path, rows, store)
    replaced = Path(rows["uri"].iloc[0])
    Image.new("RGB", (20, 20), (250, 0, 0)).save(replaced, format="PNG")
    decodes.clear()
    again = _prepare(tmp_path, rows, store)
    assert decodes == [replaced]
    assert again["train"].inputs.cache[0][0].float().mean() > 240  # the new red image, not the old one


@pytest.mark.parametrize("augment", [False, True])
def test_a_saved_dataset_holds_no_image_and_reads_them_from_the_store_without_decoding(tmp_path: Path, decodes: list[Path],
                                                                      augment: bool) -> None:
    store = DecodedStore(tmp_path / "decoded", tmp_path)
    rows = _partition(tmp_path, "p1", 9)
    data = _prepare(tmp_path, rows, store, augment=augment)
    with_store = save_prepared(data, tmp_path / "with-store.pt")
    inline = save_prepared(_prepare(tmp_path, rows, None, augment=augment), tmp_path / "inline.pt")
    assert with_store.stat().st_size < inline.stat().st_size
    decodes.clear()
    loaded = load_prepared(with_store)
    assert decodes == [] and loaded["train"].augmented == augment
    assert torch.equal(loaded["val"].inputs.cache, data["val"].inputs.cache)
    if augment:
        assert all(torch.equal(a, b) for a, b in zip(loaded["train"].inputs.sources, data["train"].inputs.sources,
                                                     strict=True))


def test_a_damaged_store_file_is_decoded_again(tmp_path: Path, decodes: list[Path],
                                               caplog: pytest.LogCaptureFixture) -> None:
    store = DecodedStore(tmp_path / "decoded", tmp_path)
    rows = _partition(tmp_path, "p1", 6)
    first = _prepare(tmp_path, rows, store)
    for file in (tmp_path / "decoded").rglob("*.pt"):
        file.write_bytes(b"not a torch file")
    decodes.clear()
    again = _prepare(tmp_path, rows, store)
    assert len(decodes) == 6 and "decoded again" in caplog.text
    assert torch.equal(again["train"].inputs.cache, first["train"].inputs.cache)


def test_groups_are_partitions_and_keys_follow_the_transform(tmp_path: Path) -> None:
    store = DecodedStore(tmp_path / "decoded", tmp_path)
    assert store.group_of(tmp_path / "partitions" / "p1" / "images" / "a.png") == ("partitions__p1", "images/a.png")
    assert store.group_of(Path("/elsewhere/a.png"))[0] == decoded.OUTSIDE_ROOT
    small, large = (eval_transform(TrainConfig(image_size=size)) for size in (8, 16))
    assert transform_key(small) == transform_key(eval_transform(TrainConfig(image_size=8)))
    assert transform_key(small) != transform_key(large)


def test_entries_of_files_gone_or_replaced_are_pruned(tmp_path: Path) -> None:
    store = DecodedStore(tmp_path / "decoded", tmp_path)
    rows = _partition(tmp_path, "p1", 6)
    _prepare(tmp_path, rows, store)
    keys = [path.name for path in (tmp_path / "decoded").iterdir()]
    assert store.prune(keys) == 0
    taken_down, replaced = Path(rows["uri"].iloc[0]), Path(rows["uri"].iloc[1])
    taken_down.unlink()
    replaced.unlink()
    Image.new("RGB", (20, 20), (0, 0, 250)).save(replaced, format="PNG")  # a new file under the same name
    assert len(keys) == 1 and store.prune(keys) == 2  # one transform (no augmentation): two entries dropped
    assert store.prune(keys) == 0
    assert store.held(Path(uri) for uri in rows["uri"]) == {Path(uri) for uri in rows["uri"].iloc[2:]}
