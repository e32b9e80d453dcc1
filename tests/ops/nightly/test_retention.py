"""Retention against a real S3 server (moto on loopback): what a night deletes, what it keeps for later nights,
resumes and production, and that it deletes nothing it cannot be sure of."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mavias.ops.nightly import retention
from mavias.ops.nightly.config import NightlyConfig, RetentionSection
from mavias.ops.nightly.layout import DECODED_KEYS_NAME
from mavias.ops.registry import ModelRegistry
from mavias.storage.s3 import S3Settings
from tests.support.s3server import moto_endpoint, s3_client, s3_settings  # noqa: F401 - fixtures

PRODUCTION = "20250303T000000-dddd0003"  # <night>-<digest[:8]>, as release.model_version names versions


def _folder(path: Path, age_s: int, decoded_keys: str | None = None) -> None:
    path.mkdir(parents=True)
    (path / "data.bin").write_bytes(b"x" * 1000)
    if decoded_keys is not None:
        (path / "dataset").mkdir()
        (path / "dataset" / DECODED_KEYS_NAME).write_text(decoded_keys)
    stamp = 1_700_000_000 - age_s
    os.utime(path, (stamp, stamp))


def _workspace(root: Path) -> None:
    keys = {"dddd0005": '["key-kept"]', "dddd0004": '["key-old"]'}  # the decoded/ folders a dataset reads
    for age, digest in enumerate(["dddd0006", "dddd0005", "dddd0004", "dddd0003", "dddd0002", "dddd0001"]):
        _folder(root / "training" / f"{digest}ffffffff", age_s=age, decoded_keys=keys.get(digest))  # dddd0006 newest
    for day in range(1, 7):
        _folder(root / "nights" / f"2025030{day}T000000", age_s=0)
    _folder(root / "nights" / "20250301T000000" / "report" / "attempt-1", age_s=0)  # not uploaded yet
    _folder(root / "production" / PRODUCTION, age_s=0)
    _folder(root / "production" / "20250301T000000-dddd0001", age_s=0)
    _folder(root / "partitions" / "p1", age_s=99)
    _folder(root / "discovery" / "tags", age_s=99)
    for key in ("key-kept", "key-old"):  # decoded images: kept while a kept dataset reads them
        _folder(root / "decoded" / key, age_s=99)


def _config(settings: S3Settings, root: Path) -> NightlyConfig:
    return NightlyConfig(model_name="m", s3=settings, workspace=root,
                         retention=RetentionSection(keep_datasets=2, keep_nights=2))


def _promote(client, settings: S3Settings, tmp_path: Path) -> None:  # noqa: ANN001 - boto3 client
    package = tmp_path / "package"
    package.mkdir()
    (package / "model.onnx").write_bytes(b"onnx")
    registry = ModelRegistry(client, settings, "m")
    registry.publish_version(package, PRODUCTION)
    registry.promote(PRODUCTION, expected_current=None)


def test_a_night_keeps_the_newest_tonights_and_productions_and_deletes_the_rest(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    root = tmp_path / "ws"
    _workspace(root)
    _promote(s3_client, s3_settings, tmp_path)
    pruned = retention.clean_up(_config(s3_settings, root), "20250306T000000", digest="dddd0001ffffffff")
    kept = sorted(p.relative_to(root).as_posix() for p in root.glob("*/*"))
    assert kept == ["decoded/key-kept", "discovery/tags", "nights/20250301T000000", "nights/20250303T000000", "nights/20250305T000000",
                    "nights/20250306T000000", "partitions/p1", f"production/{PRODUCTION}",
                    "training/dddd0001ffffffff", "training/dddd0003ffffffff", "training/dddd0005ffffffff",
                    "training/dddd0006ffffffff"]  # 20250301: its report is not uploaded yet
    assert sorted(pruned["deleted"]) == ["decoded/key-old", "nights/20250302T000000", "nights/20250304T000000",
                                         "production/20250301T000000-dddd0001", "training/dddd0002ffffffff",
                                         "training/dddd0004ffffffff"]
    decoded_records = len('["key-kept"]')
    assert pruned["production"] == PRODUCTION
    assert pruned["kept_bytes"] == (len(kept) - 2 + 1) * 1000 + decoded_records  # not partitions/ or discovery/
    again = retention.clean_up(_config(s3_settings, root), "20250306T000000", digest="dddd0001ffffffff")
    assert again["deleted"] == []  # idempotent


def test_an_unreadable_production_pointer_deletes_nothing(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    root = tmp_path / "ws"
    _workspace(root)
    s3_client.put_object(Bucket=s3_settings.bucket, Key=f"{s3_settings.models_prefix}m/production.json", Body=b"{")
    pruned = retention.clean_up(_config(s3_settings, root), "20250306T000000")
    assert pruned["production"] is None and pruned["deleted"] == []
    assert [len(list((root / name).iterdir())) for name in ("training", "decoded", "nights", "production")] == [6, 2, 6, 2]


def test_a_folder_that_cannot_be_deleted_fails_the_clean_up_by_name_after_the_others_went(
    s3_client, s3_settings: S3Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
) -> None:
    root = tmp_path / "ws"
    _workspace(root)
    _promote(s3_client, s3_settings, tmp_path)
    stuck = root / "nights" / "20250302T000000"
    real_rmtree = shutil.rmtree

    def refusing(path: Path, *args, **kwargs) -> None:  # a busy mount or a folder of another owner
        if Path(path) == stuck:
            raise PermissionError(1, "Operation not permitted", str(path))
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(retention.shutil, "rmtree", refusing)
    with pytest.raises(retention.RetentionIncomplete, match="could not delete 1 folder.*nights/20250302T000000"):
        retention.clean_up(_config(s3_settings, root), "20250306T000000", digest="dddd0001ffffffff")
    assert stuck.is_dir() and not (root / "nights" / "20250304T000000").exists()  # the others were deleted
