"""More faults of the nightly steps, each injected for real on 127.0.0.1: a stalled S3 endpoint against the step
deadlines, a missing evaluation set, and production pointers whose history is empty before and after versions were
published."""

from __future__ import annotations

import html
import time
from pathlib import Path

import pytest

from mavias.errors import UserError
from mavias.ops.nightly import ingest, release
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.incoming import ProcessedLedger
from mavias.ops.nightly.layout import EvaluationSetMissing
from mavias.ops.registry import CorruptPointer, ModelRegistry
from mavias.storage.s3 import S3Settings, StorageDeadline, put_json
from mavias.tools.demo.services import smtp_server
from tests.ops.nightly.test_faults import CLASSES, NIGHT, _behind_proxy, _config, _publish, _report, _smtp
from tests.support.s3server import (  # noqa: F401 - fixtures
    FaultInjectingProxy,
    faulty_proxy,
    moto_endpoint,
    s3_client,
    s3_settings,
    seed_partition,
)


def test_report_on_a_stalled_bucket_is_bounded_by_its_deadline_and_still_goes_out(
    faulty_proxy: FaultInjectingProxy, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    """Every request stalls far longer than the read timeout allows and is retried by botocore (5 attempts x 60 s
    each without a deadline): the report's deadline stops the waiting, and the report is made and sent anyway."""
    settings = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url})
    cfg = NightlyConfig(model_name="m", s3=settings, workspace=tmp_path / "ws",
                        report={"recipients": ["ml@example.com"], "storage_deadline_s": 3})
    faulty_proxy.stall_next(1000, 30.0)
    with smtp_server(tmp_path / "mail") as port:
        started = time.monotonic()
        result = _report(cfg, _smtp(port))
        seconds = time.monotonic() - started
    assert seconds < 20, seconds
    assert result["sent"] == [result["queued"]] and not result["uploaded"]
    assert "did not answer within the report step's deadline of 3 s" in html.unescape(Path(result["html"]).read_text())


def test_a_step_deadline_is_a_clear_error_and_not_retried(
    faulty_proxy: FaultInjectingProxy, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    settings = _behind_proxy(faulty_proxy, s3_client, s3_settings)
    cfg = _config(settings, tmp_path / "ws", step_deadline_s=2, outage_retry_s=60)
    sensed = ingest.sense(cfg, NIGHT)
    faulty_proxy.stall_next(1000, 30.0)
    started = time.monotonic()
    with pytest.raises(StorageDeadline, match="pull_and_validate step's deadline of 2 s"):
        ingest.pull_and_validate(cfg, sensed)
    assert time.monotonic() - started < 15  # not outage_retry_s, not 5 attempts x 60 s
    assert ProcessedLedger(s3_client, s3_settings).quarantined() == set()


def test_a_missing_evaluation_set_says_which_and_how_to_provide_it(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    seed_partition(s3_client, s3_settings, "good", CLASSES)
    cfg = NightlyConfig(model_name="m", s3=s3_settings, workspace=tmp_path / "ws", evaluation={"version": "v9"})
    with pytest.raises(EvaluationSetMissing) as err:
        ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    message = str(err.value)
    assert f"evaluation set 'v9' is missing: s3://{s3_settings.bucket}/evaluation/v9/ has no manifest.parquet" in message
    assert "Upload the fixed evaluation set there" in message and "MAVIAS_NIGHTLY__EVALUATION__VERSION" in message
    assert isinstance(err.value, UserError)  # a mistake to fix: the DAG fails the task at once, no retries


def test_empty_history_before_any_publication_is_no_production_and_the_next_promotion_wins(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    registry = ModelRegistry(s3_client, s3_settings, "m")
    put_json(s3_client, s3_settings, registry.pointer_key, {"name": "m", "history": []})
    assert registry.production() is None
    _publish(registry, tmp_path, "v1")
    with pytest.raises(CorruptPointer, match="history is empty while 1 version"):  # published since: lost history
        registry.production()
    put_json(s3_client, s3_settings, registry.pointer_key, {"name": "m", "history": []})
    cfg = _config(s3_settings, tmp_path / "ws")
    evaluated = {"production_etag": None, "production_version": None}
    promoted = release.promote(cfg, {"version": "v1", "uri": registry.version_uri("v1")}, evaluated)
    assert not promoted["promoted"] and "the promotion history was lost" in promoted["reason"]


def test_empty_history_while_versions_are_published_is_corrupt_and_repaired(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    registry = ModelRegistry(s3_client, s3_settings, "m")
    _publish(registry, tmp_path, "v1", "v2")
    put_json(s3_client, s3_settings, registry.pointer_key, {"name": "m", "history": []})
    with pytest.raises(CorruptPointer, match=r"history is empty while 2 version\(s\) are published \(newest v2\)"):
        registry.production()
    assert registry.repair().version == "v2"
    put_json(s3_client, s3_settings, registry.pointer_key, {"name": "m", "history": []})
    nothing_passed = ModelRegistry(s3_client, s3_settings, "n")
    _publish(nothing_passed, tmp_path / "n", "v1", passed=False)
    put_json(s3_client, s3_settings, nothing_passed.pointer_key, {"name": "n", "history": []})
    with pytest.raises(CorruptPointer, match="repair --name n --version VERSION"):
        nothing_passed.repair()
    assert nothing_passed.repair("v1").version == "v1"


def test_a_pointer_repaired_before_any_version_lets_the_first_be_promoted(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    """Nothing to keep and nothing to promote: the repair leaves no pointer, not an empty one that the first publish
    would turn into a 'lost history' every night."""
    registry = ModelRegistry(s3_client, s3_settings, "m")
    s3_client.put_object(Bucket=s3_settings.bucket, Key=registry.pointer_key, Body=b"")  # an empty upload
    assert registry.repair() is None
    _publish(registry, tmp_path, "v1")
    assert registry.promote("v1", None) and registry.production().version == "v1"
