"""Model registry against a real moto_server: immutability, promotion races, history, rollback, faults, CLI."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from mavias.cli import app as root
from mavias.cli.registry import app
from mavias.ops.registry import ModelRegistry, RegistryError, VersionExists, VersionNotFound
from mavias.storage.s3 import make_s3_client, stored_sha256, upload_file
from mavias.utils.disk import sha256_file
from tests.support.s3server import (  # noqa: F401 - fixtures
    faulty_proxy,
    moto_endpoint,
    s3_client,
    s3_settings,
)


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "model.onnx").write_bytes(b"onnx bytes")
    (tmp_path / "export" / "classes.json").write_text('["cat", "dog"]')
    return tmp_path / "export"


@pytest.fixture
def registry(s3_client, s3_settings):
    return ModelRegistry(s3_client, s3_settings, "resnet")


def _publish(registry: ModelRegistry, model_dir, *versions: str) -> None:
    for version in versions:
        registry.publish_version(model_dir, version)


def _promote(registry: ModelRegistry, version: str) -> bool:
    current = registry.production()
    return registry.promote(version, current.etag if current else None)


def test_a_publish_cut_off_part_way_is_resumed_and_a_foreign_one_refused(registry, model_dir, s3_client, s3_settings):
    bucket = s3_settings.bucket
    s3_client.put_object(Bucket=bucket, Key="models/resnet/v1/model.onnx", Body=b"onnx bytes")  # cut off after one
    before = s3_client.head_object(Bucket=bucket, Key="models/resnet/v1/model.onnx")["LastModified"]
    assert registry.versions() == []  # no marker: not a version yet
    assert registry.publish_version(model_dir, "v1").endswith("/v1/")
    assert registry.versions() == ["v1"]
    assert s3_client.head_object(Bucket=bucket, Key="models/resnet/v1/model.onnx")["LastModified"] == before  # kept
    assert json.loads(s3_client.get_object(Bucket=bucket, Key="models/resnet/v1/_version.json")["Body"].read())[
        "files"] == ["classes.json", "model.onnx"]
    s3_client.put_object(Bucket=bucket, Key="models/resnet/v2/model.onnx", Body=b"another model")
    with pytest.raises(VersionExists, match="differ from this package \\(model.onnx\\)"):
        registry.publish_version(model_dir, "v2")
    assert registry.versions() == ["v1"]


@pytest.mark.parametrize(("landed", "published"), [(b"onnx bytes", True), (b"another model", False)])
def test_a_file_found_there_on_upload_is_this_packages_or_the_version_is_another_publishers(
        registry, model_dir, s3_settings, landed, published):
    """A PUT whose reply was lost is retried by the SDK and refused (the file is there): the same bytes let the
    publish go on, other bytes are another publisher's version."""
    other = make_s3_client(s3_settings)

    def land_first(params, **_):
        if params["Key"].endswith("model.onnx") and not other.list_objects_v2(
                Bucket=params["Bucket"], Prefix=params["Key"]).get("KeyCount"):
            other.put_object(Bucket=params["Bucket"], Key=params["Key"], Body=landed)

    registry.client.meta.events.register("provide-client-params.s3.PutObject", land_first)
    if published:
        assert registry.publish_version(model_dir, "v1").endswith("/v1/") and registry.versions() == ["v1"]
    else:
        with pytest.raises(VersionExists, match="differ from this package"):
            registry.publish_version(model_dir, "v1")
        assert registry.versions() == []


def test_a_resumed_publish_compares_the_sha256_stored_with_each_file_not_its_etag(registry, model_dir, s3_client,
                                                                                     s3_settings):
    # on an encrypted bucket (SSE-KMS) the ETag is no MD5: the sha256 stored at upload decides, where there is one
    bucket, onnx = s3_settings.bucket, (model_dir / "model.onnx").read_bytes()
    upload_file(s3_client, s3_settings, model_dir / "model.onnx", "models/resnet/v1/model.onnx")  # cut off after one
    assert stored_sha256(s3_client, s3_settings, "models/resnet/v1/model.onnx") == sha256_file(model_dir / "model.onnx")
    assert registry.publish_version(model_dir, "v1").endswith("/v1/")
    s3_client.put_object(Bucket=bucket, Key="models/resnet/v2/model.onnx", Body=onnx, Metadata={"sha256": "0" * 64})
    with pytest.raises(VersionExists, match="differ from this package \\(model.onnx\\)"):
        registry.publish_version(model_dir, "v2")  # the same bytes, so the same MD5: the stored digest still wins


def test_versions_are_immutable(registry, model_dir, s3_client, s3_settings):
    uri = registry.publish_version(model_dir, "v1")
    assert uri == f"s3://{s3_settings.bucket}/models/resnet/v1/"
    key = "models/resnet/v1/model.onnx"
    etag = s3_client.head_object(Bucket=s3_settings.bucket, Key=key)["ETag"]
    (model_dir / "model.onnx").write_bytes(b"other bytes")

    with pytest.raises(VersionExists):
        registry.publish_version(model_dir, "v1")
    with pytest.raises(RegistryError, match="invalid version"):
        registry.publish_version(model_dir, "../v2")
    with pytest.raises(VersionNotFound):
        registry.promote("v9", None)
    assert s3_client.head_object(Bucket=s3_settings.bucket, Key=key)["ETag"] == etag
    assert registry.versions() == ["v1"]


def test_promotion_history_and_rollback(registry, model_dir):
    _publish(registry, model_dir, "v1", "v2", "v3", "v4")
    assert registry.production() is None
    assert _promote(registry, "v1")
    assert not registry.promote("v2", None)  # stale: the caller did not see v1's promotion
    for version in ("v2", "v3"):
        assert _promote(registry, version)

    assert registry.rollback().version == "v2"
    assert registry.rollback().version == "v1"
    with pytest.raises(RegistryError, match="no earlier production version"):
        registry.rollback()
    assert _promote(registry, "v4")
    assert registry.rollback().version == "v1"

    history = registry.history()
    assert [(r.action, r.version) for r in history] == [
        ("promote", "v1"),
        ("promote", "v2"),
        ("promote", "v3"),
        ("rollback", "v2"),
        ("rollback", "v1"),
        ("promote", "v4"),
        ("rollback", "v1"),
    ]
    assert [r.seq for r in history] == list(range(1, 8))
    assert registry.production().version == "v1"


def test_production_and_the_etag_a_promotion_expects_come_from_one_read(registry, model_dir):
    _publish(registry, model_dir, "v1", "v2")
    assert registry.production_and_etag() == (None, None)  # no pointer yet: a first promotion expects none
    assert _promote(registry, "v1")
    record, etag = registry.production_and_etag()
    assert record.version == "v1" and record.etag == etag is not None
    assert registry.promote("v2", etag)  # the pair is what promote expects


@pytest.mark.parametrize("contenders", [2, 8])
def test_concurrent_promotions_exactly_one_wins(s3_settings, model_dir, contenders):
    """Each round every contender reads the same pointer, then all write at once: one wins, the others change
    nothing. Round 0 races to create the pointer (If-None-Match), later rounds to replace it (If-Match)."""
    rounds = 3
    registries = [ModelRegistry(make_s3_client(s3_settings), s3_settings, "resnet") for _ in range(contenders)]
    _publish(registries[0], model_dir, *(f"r{r}c{i}" for r in range(rounds) for i in range(contenders)))
    for round_ in range(rounds):
        before = registries[0].history()
        seen = [r.production() for r in registries]
        start = threading.Barrier(contenders)

        def contend(i: int) -> bool:
            start.wait(timeout=30)
            return registries[i].promote(f"r{round_}c{i}", seen[i].etag if seen[i] else None)

        with ThreadPoolExecutor(contenders) as pool:
            won = list(pool.map(contend, range(contenders)))

        assert sum(won) == 1, f"round {round_}: {won}"
        history = registries[0].history()
        assert history[:-1] == before
        assert history[-1].version == registries[0].production().version == f"r{round_}c{won.index(True)}"


def test_promotion_survives_transient_errors_and_lost_replies(s3_settings, model_dir, faulty_proxy):
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url})
    registry = ModelRegistry(make_s3_client(proxied), proxied, "resnet")
    _publish(registry, model_dir, "v1", "v2")

    faulty_proxy.fail_next(2)
    assert _promote(registry, "v1")
    current = registry.production()
    # The PUT is applied but its reply is lost; botocore's retry is then refused by If-Match.
    faulty_proxy.fail_next(1, method="PUT", after_forwarding=True)
    assert registry.promote("v2", current.etag)

    assert [r.version for r in registry.history()] == ["v1", "v2"]
    assert faulty_proxy.failures_served == 3


def test_cli(s3_settings, registry, model_dir, monkeypatch):
    _publish(registry, model_dir, "v1", "v2")
    env = {
        "MAVIAS_S3_BUCKET": s3_settings.bucket,
        "MAVIAS_S3_ENDPOINT_URL": s3_settings.endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "MAVIAS_MODEL_NAME": "resnet",
    }
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args), env=env)

    assert invoke("promote", "v1").exit_code == 0
    assert invoke("promote", "v2").exit_code == 0
    listed = invoke("list")
    assert listed.exit_code == 0 and listed.output.split("\n")[:2] == ["  v1", "* v2"]
    rolled = invoke("rollback")
    assert rolled.exit_code == 0 and "production: v1" in rolled.output
    shown = invoke("show")
    assert "production: v1" in shown.output and "rollback" in shown.output
    assert [r["version"] for r in json.loads(invoke("show", "--json").output)] == ["v1", "v2", "v1"]
    failed = runner.invoke(root, ["registry", "promote", "v7"], env=env)
    assert failed.exit_code == 2 and "not a published version" in failed.output and "registry list" in failed.output
    history = invoke("show", "--json").output
    again = runner.invoke(root, ["registry", "promote", "v1"], env=env)  # a repeated promotion: nothing to do
    assert again.exit_code == 0 and "production: v1 (already; nothing changed)" in again.output
    assert invoke("show", "--json").output == history
    misspelt = runner.invoke(root, ["registry", "list", "--name", "resnt"], env=env)
    assert misspelt.exit_code == 0 and "no published version of 'resnt' under" in misspelt.output
    for args in (["list", "--name", "../x"], ["promote", "../v1"]):  # a user's mistake: exit status 2, as every one
        unsafe = runner.invoke(root, ["registry", *args], env=env)
        assert unsafe.exit_code == 2 and "invalid" in unsafe.output and "Traceback" not in unsafe.output


def test_a_bucket_given_as_a_uri_and_a_store_that_never_answers_are_one_line_each(tmp_path):
    """`MAVIAS_S3_BUCKET=s3://models` and an endpoint that accepts connections but never replies (a read timeout,
    not a refused connection): exit status 2 and what to check, never a traceback."""
    import socket

    runner = CliRunner()
    as_uri = runner.invoke(root, ["registry", "show", "--name", "m"], env={"MAVIAS_S3_BUCKET": "s3://models"})
    assert as_uri.exit_code == 2 and "'s3://models' is not a bucket name" in as_uri.output
    assert "Traceback" not in as_uri.output
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody ever answers
        env = {"MAVIAS_S3_BUCKET": "models", "MAVIAS_S3_ENDPOINT_URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
               "MAVIAS_S3_READ_TIMEOUT_S": "0.5", "MAVIAS_S3_MAX_ATTEMPTS": "1", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing"}
        silent_store = runner.invoke(root, ["registry", "show", "--name", "m"], env=env)
    assert silent_store.exit_code == 2 and "cannot reach the object store at http://127.0.0.1:" in silent_store.output
    assert "ReadTimeoutError" in silent_store.output and "Traceback" not in silent_store.output


def test_list_names_the_versions_to_choose_from_when_the_pointer_is_corrupt(s3_settings, registry, model_dir,
                                                                            s3_client):
    """`repair` asks for a VERSION: `list` must still list them (production unknown), not fail on the pointer."""
    _publish(registry, model_dir, "v1", "v2")
    s3_client.put_object(Bucket=s3_settings.bucket, Key=registry.pointer_key, Body=b"{not json")
    env = {"MAVIAS_S3_BUCKET": s3_settings.bucket, "MAVIAS_S3_ENDPOINT_URL": s3_settings.endpoint_url,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "MAVIAS_MODEL_NAME": "resnet"}
    listed = CliRunner().invoke(app, ["list"], env=env)
    assert listed.exit_code == 0 and listed.stdout.split("\n")[:2] == ["  v1", "  v2"]
    assert "production is unknown, the pointer is corrupt" in listed.output and "repair --name resnet" in listed.output
