"""`mavias data import s3` against a real S3-compatible server (moto_server on 127.0.0.1)."""

from __future__ import annotations

import hashlib

from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets import SplitOptions, import_imagefolder, import_s3, settings_for
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.manifest import read_manifest_table
from mavias.storage.s3 import upload_dir
from tests.support.s3server import moto_endpoint, s3_client, s3_settings  # noqa: F401 - fixtures


def test_s3_layout_matches_the_local_import(s3_client, s3_settings, tmp_path):
    root = write_imagefolder(tmp_path / "data", {"cat": 3, "dog": 3}, splits=("train", "val"))
    (root / "train" / "cat" / "broken.jpg").write_bytes(b"garbage")
    upload_dir(s3_client, s3_settings, root, "datasets/pets/")
    uri = f"s3://{s3_settings.bucket}/datasets/pets/"
    remote = import_s3(uri, s3_settings, SplitOptions(split_from=True), progress=False)
    local = import_imagefolder(root, SplitOptions(split_from=True), progress=False)
    assert sorted(remote.manifest["sample_id"]) == sorted(local.manifest["sample_id"])
    assert remote.manifest["uri"].str.startswith(f"{uri}train/").sum() == 6
    assert remote.quarantined["uri"].tolist() == [f"{uri}train/cat/broken.jpg"]
    assert remote.quarantined["reason"].str.startswith("cannot decode").all()
    row = remote.manifest.iloc[0]
    body = s3_client.get_object(Bucket=s3_settings.bucket, Key=row["uri"][len(f"s3://{s3_settings.bucket}/"):])["Body"].read()
    assert row["sample_id"] == hashlib.sha256(body).hexdigest()[:16]


def test_s3_cli_with_endpoint_option(s3_client, s3_settings, tmp_path, monkeypatch):
    root = write_imagefolder(tmp_path / "data", {"a": 4, "b": 4})
    upload_dir(s3_client, s3_settings, root, "flat/")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    uri = f"s3://{s3_settings.bucket}/flat"
    assert settings_for(uri, endpoint_url=s3_settings.endpoint_url, environ={}).bucket == s3_settings.bucket
    result = CliRunner().invoke(app, ["data", "import", "s3", uri, "--out", str(tmp_path / "out"),
                                      "--endpoint-url", s3_settings.endpoint_url, "--val", "0.25", "--test", "0.25"])
    assert result.exit_code == 0, result.output
    manifest = read_manifest_table(tmp_path / "out" / "manifest.parquet")
    assert manifest.groupby("split").size().to_dict() == {"test": 2, "train": 4, "val": 2}


def test_a_bucket_that_does_not_exist_is_named_by_its_uri(s3_settings, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    uri = f"s3://{s3_settings.bucket}-missing/flat/"
    result = CliRunner().invoke(app, ["data", "import", "s3", uri, "--out", str(tmp_path / "out"),
                                      "--endpoint-url", s3_settings.endpoint_url])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"the bucket of {uri} does not exist; check the URI, or --endpoint-url" in result.output
