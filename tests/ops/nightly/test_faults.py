"""Nightly steps under real faults, each injected for real on 127.0.0.1: missing and truncated images, the S3
endpoint refusing connections or stalling, unsafe names, corrupt production pointers, S3 and SMTP outages
during the report, and a rerun of a finished night."""

from __future__ import annotations

import errno
import json
import threading
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError
from typer.testing import CliRunner

from mavias.cli.registry import app as registry_cli
from mavias.core.manifest import ManifestError, quarantine
from mavias.core.relevance import RELEVANCE_COLUMNS
from mavias.core.train.prepare import prepare_image_data
from mavias.ops.nightly import ingest, layout, release, report
from mavias.ops.nightly.config import NightlyConfig, NightlyConfigError, load_nightly_config
from mavias.ops.nightly.incoming import ProcessedLedger
from mavias.ops.nightly.pull import pull_partition, still_uploading
from mavias.ops.registry import CorruptPointer, ModelRegistry
from mavias.ops.reporting.mail import SmtpSettings
from mavias.storage.names import UnsafeName
from mavias.storage.s3 import S3Settings, get_json, is_transient
from mavias.tools.demo.services import smtp_server
from mavias.utils.servers import free_port
from tests.ops.reporting.test_report import visible_text
from tests.support.s3server import (  # noqa: F401 - fixtures
    FaultInjectingProxy,
    faulty_proxy,
    moto_endpoint,
    png_bytes,
    s3_client,
    s3_settings,
    seed_partition,
    write_local_partition,
)

NIGHT = datetime(2025, 4, 1)
CLASSES = ["bird", "boat", "car"]
FAST_FAIL = {"max_attempts": 1, "connect_timeout_s": 1, "read_timeout_s": 1}  # botocore gives up at once


def _config(settings: S3Settings, workspace: Path, **s3: object) -> NightlyConfig:
    return NightlyConfig(model_name="m", s3=settings.model_copy(update=s3), workspace=workspace)


def _seed_evaluation(client, settings: S3Settings) -> None:  # noqa: ANN001 - boto3 client
    seed_partition(client, settings.model_copy(update={"incoming_prefix": "evaluation/"}), "v1", CLASSES)


def _files_outside(root: Path, workspace: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and workspace not in p.parents]


# -- 1. a missing and a truncated image: quarantined per row, the rest trains -----------------------------------------


def test_missing_and_truncated_images_are_quarantined_per_row_and_the_rest_trains(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    _seed_evaluation(s3_client, s3_settings)
    manifest = seed_partition(s3_client, s3_settings, "p1", CLASSES * 20)  # 60 rows: 2 bad ones keep 96.7% ...
    prefix = "incoming/p1/"
    s3_client.delete_object(Bucket=s3_settings.bucket, Key=prefix + manifest["uri"][0])
    s3_client.put_object(Bucket=s3_settings.bucket, Key=prefix + manifest["uri"][1], Body=png_bytes("x", 32)[:60])
    s3_client.put_object(Bucket=s3_settings.bucket, Key=prefix + "_SUCCESS", Body=b"")  # the producer says: complete
    cfg = _config(s3_settings, tmp_path / "ws")
    validated = ingest.pull_and_validate(cfg.model_copy(), ingest.sense(cfg, NIGHT))
    validation = json.loads(Path(validated["validations"]["p1"]["path"]).read_text())
    assert validated["valid"] == ["p1"]  # ... below 98%, but within chance for 60 images: the partition is kept
    reasons = {row["uri"]: row["reason"] for row in validation["quarantined"]}
    assert reasons[manifest["uri"][0]] == "file not found" and "cannot decode" in reasons[manifest["uri"][1]]

    local = tmp_path / "ws" / "partitions" / "p1" / "manifest.parquet"
    data = prepare_image_data(
        local, relevance=pd.DataFrame(columns=RELEVANCE_COLUMNS), encoder=None, store_dir=None, image_size=8,
        tags_table=pd.DataFrame({"sample_id": pd.Series(dtype=str), "tag": pd.Series(dtype=str)}), progress=False,
    )
    assert sorted(data.quarantined["uri"]) == sorted(manifest["uri"][:2])
    assert len(data["train"]) == len(manifest) - 2


def test_one_missing_image_among_many_passes_validation_with_the_row_quarantined(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    _seed_evaluation(s3_client, s3_settings)
    manifest = seed_partition(s3_client, s3_settings, "p1", CLASSES * 20)
    s3_client.delete_object(Bucket=s3_settings.bucket, Key="incoming/p1/" + manifest["uri"][5])
    cfg = NightlyConfig(model_name="m", s3=s3_settings, workspace=tmp_path / "ws")
    waited = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))  # the manifest is fresh: maybe still uploading
    assert waited["valid"] == waited["failed"] == [] and "1 file(s)" in waited["waiting"]["p1"]
    assert ProcessedLedger(s3_client, s3_settings).quarantined() == set()
    late = cfg.model_copy(update={"validation": cfg.validation.model_copy(update={"max_upload_wait_h": 0})})
    validated = ingest.pull_and_validate(late, ingest.sense(late, NIGHT))  # waited long enough: the file is lost
    assert validated["valid"] == ["p1"] and validated["waiting"] == {}  # 59 of 60 decode: above 98%
    validation = json.loads(Path(validated["validations"]["p1"]["path"]).read_text())
    assert [(q["uri"], q["reason"]) for q in validation["quarantined"]] == [(manifest["uri"][5], "file not found")]


def test_a_partition_still_uploading_waits_and_is_taken_once_complete(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    """`aws s3 sync` uploads in any order: a manifest that arrives before its images is not a broken partition."""
    _seed_evaluation(s3_client, s3_settings)
    manifest = seed_partition(s3_client, s3_settings, "p1", CLASSES * 10)
    held_back = {uri: s3_client.get_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{uri}")["Body"].read()
                 for uri in manifest["uri"][:12]}
    for uri in held_back:
        s3_client.delete_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{uri}")
    cfg = _config(s3_settings, tmp_path / "ws")
    first = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    assert first["waiting"].keys() == {"p1"} and "12 file(s)" in first["waiting"]["p1"]
    assert first["valid"] == first["failed"] == [] and "p1" not in first["validations"]
    assert ingest.sense(cfg, NIGHT)["new"] == ["p1"]  # neither processed nor quarantined: tried again
    for uri, body in held_back.items():
        s3_client.put_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{uri}", Body=body)
    second = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    assert second["valid"] == ["p1"] and second["waiting"] == {}


def test_files_that_arrive_while_the_partition_is_pulled_wait_for_the_next_try_not_quarantine(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    manifest = seed_partition(s3_client, s3_settings, "p1", CLASSES * 10)
    late = manifest["uri"][0]
    body = s3_client.get_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{late}")["Body"].read()
    s3_client.delete_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{late}")
    pulled = pull_partition(s3_client, s3_settings, "p1", tmp_path / "p1", pinned=False)
    s3_client.put_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{late}", Body=body)  # during the pull
    s3_client.put_object(Bucket=s3_settings.bucket, Key="incoming/p1/_SUCCESS", Body=b"")  # declared finished
    waiting = still_uploading(s3_client, s3_settings, "p1", pulled, max_wait_h=0)
    assert waiting is not None and "1 file(s) its manifest names arrived after they were pulled" in waiting
    again = pull_partition(s3_client, s3_settings, "p1", tmp_path / "p1", pinned=False)
    assert still_uploading(s3_client, s3_settings, "p1", again, max_wait_h=0) is None


def test_an_object_too_large_for_an_image_is_quarantined_without_being_downloaded(
    s3_client, s3_settings: S3Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
) -> None:
    _seed_evaluation(s3_client, s3_settings)
    manifest = seed_partition(s3_client, s3_settings, "p1", CLASSES * 20)
    huge = manifest["uri"][3]
    s3_client.put_object(Bucket=s3_settings.bucket, Key=f"incoming/p1/{huge}", Body=b"\0" * 4096)
    monkeypatch.setattr(quarantine, "MAX_IMAGE_BYTES", 2048)  # the test images are smaller; a real limit is 256 MB
    cfg = _config(s3_settings, tmp_path / "ws")
    validated = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    assert validated["valid"] == ["p1"] and validated["waiting"] == {}  # not waited for: 59 of 60 decode
    assert not (layout.layout(cfg).partition("p1") / huge).exists()
    validation = json.loads(Path(validated["validations"]["p1"]["path"]).read_text())
    [(uri, reason)] = [(q["uri"], q["reason"]) for q in validation["quarantined"]]
    assert uri == huge and reason == "too large: 4,096 bytes, more than the 2,048 of any one image"


# -- 2. transient I/O: retried, then failing without quarantining -----------------------------------------------------


def _behind_proxy(proxy: FaultInjectingProxy, client, settings: S3Settings) -> S3Settings:  # noqa: ANN001
    """A good partition and the evaluation set, reached through ``proxy``."""
    _seed_evaluation(client, settings)
    seed_partition(client, settings, "good", CLASSES)
    return settings.model_copy(update={"endpoint_url": proxy.endpoint_url})


def test_connection_refused_longer_than_one_retry_then_back_validates_normally(
    faulty_proxy: FaultInjectingProxy, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    settings = _behind_proxy(faulty_proxy, s3_client, s3_settings)
    cfg = _config(settings, tmp_path / "ws", outage_retry_s=60, **FAST_FAIL)
    sensed = ingest.sense(cfg, NIGHT)
    faulty_proxy.go_down()
    back = threading.Timer(4.0, faulty_proxy.come_back)  # longer than botocore's retries and tenacity's first waits
    back.start()
    started = time.monotonic()
    validated = ingest.pull_and_validate(cfg, sensed)
    back.join()
    assert time.monotonic() - started >= 4.0
    assert validated["valid"] == ["good"] and validated["failed"] == []
    assert ProcessedLedger(s3_client, s3_settings).quarantined() == set()


def test_an_outage_longer_than_the_retries_fails_the_step_and_quarantines_nothing(
    faulty_proxy: FaultInjectingProxy, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    settings = _behind_proxy(faulty_proxy, s3_client, s3_settings)
    cfg = _config(settings, tmp_path / "ws", outage_retry_s=2, **FAST_FAIL)
    sensed = ingest.sense(cfg, NIGHT)
    faulty_proxy.go_down()
    try:
        with pytest.raises(EndpointConnectionError):
            ingest.pull_and_validate(cfg, sensed)
    finally:
        faulty_proxy.come_back()
    assert ProcessedLedger(s3_client, s3_settings).quarantined() == set()
    assert ingest.sense(cfg, NIGHT)["new"] == ["good"]  # still there for the next try


def test_read_timeouts_are_retried_then_fail_without_quarantining(
    faulty_proxy: FaultInjectingProxy, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    settings = _behind_proxy(faulty_proxy, s3_client, s3_settings)
    sensed = ingest.sense(_config(settings, tmp_path / "ws"), NIGHT)

    faulty_proxy.stall_next(2, 2.0, method="GET")  # two stalled reads: retried, then the night goes on
    validated = ingest.pull_and_validate(_config(settings, tmp_path / "ws", outage_retry_s=60, **FAST_FAIL), sensed)
    assert validated["valid"] == ["good"] and faulty_proxy.failures_served == 2

    faulty_proxy.stall_next(100, 1.5, method="GET")  # the store stalls for good: the step fails, data stays
    with pytest.raises(ReadTimeoutError):
        ingest.pull_and_validate(_config(settings, tmp_path / "ws2", outage_retry_s=2, **FAST_FAIL), sensed)
    assert ProcessedLedger(s3_client, s3_settings).quarantined() == set()


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ClientError({"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject"), True),
        (ClientError({"Error": {"Code": "Throttling"}, "ResponseMetadata": {"HTTPStatusCode": 400}}, "GetObject"), True),
        (ClientError({"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "PutObject"),
         True),
        (ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"), True),
        (ClientError({"Error": {"Code": "NoSuchKey"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "GetObject"), False),
        (ClientError({"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject"),
         False),
        (ManifestError("bad manifest"), False),
        (ValueError("not parquet"), False),
    ],
)
def test_transient_errors_are_told_from_bad_data(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


@pytest.mark.parametrize(("error", "machine"), [(OSError(errno.ENOSPC, "No space left on device"), True),
                                               (PermissionError(errno.EACCES, "Permission denied"), True),
                                               (OSError("Parquet magic bytes not found in footer"), False),
                                               (ValueError("not parquet"), False)])
def test_a_full_disk_is_told_from_bad_data(error: Exception, machine: bool) -> None:
    assert ingest.is_machine_fault(error) is machine  # a fault of the machine fails the step, quarantines nothing


def test_undecodable_manifest_is_still_quarantined_as_bad_data(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    _seed_evaluation(s3_client, s3_settings)
    s3_client.put_object(Bucket=s3_settings.bucket, Key="incoming/junk/manifest.parquet", Body=b"not parquet")
    cfg = _config(s3_settings, tmp_path / "ws")
    validated = ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))
    assert validated["failed"] == ["junk"]
    assert ProcessedLedger(s3_client, s3_settings).quarantined() == {"junk"}


# -- 3. unsafe names ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", "../../x", "/etc", "a/b", ".hidden", "", "a..b"])
def test_unsafe_force_partition_is_refused_and_nothing_is_written_outside_the_workspace(
    name: str, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg = _config(s3_settings, tmp_path / "root" / "ws")
    with pytest.raises(UnsafeName, match="invalid force_partition"):
        ingest.sense(cfg, NIGHT, force_partition=name or "./")
    with pytest.raises(UnsafeName):
        layout.layout(cfg).partition(name)
    assert _files_outside(tmp_path, tmp_path / "root" / "ws") == []


def test_unsafe_incoming_folder_is_ignored_and_listed_in_the_report(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    _seed_evaluation(s3_client, s3_settings)
    seed_partition(s3_client, s3_settings, "good", CLASSES)
    s3_client.put_object(Bucket=s3_settings.bucket, Key="incoming/a..b/manifest.csv", Body=b"x")
    s3_client.put_object(Bucket=s3_settings.bucket, Key="incoming/bad\u202ename/manifest.csv", Body=b"x")
    cfg = _config(s3_settings, tmp_path / "root" / "ws")
    sensed = ingest.sense(cfg, NIGHT)
    assert sensed["new"] == ["good"] and sensed["unsafe"] == ["'a..b'", "'bad\\u202ename'"]
    validated = ingest.pull_and_validate(cfg, sensed)
    assert _files_outside(tmp_path, tmp_path / "root" / "ws") == []
    result = report.report(cfg, {"sensed": sensed, "validated": validated}, trained=False, decision="testing")
    text = visible_text(Path(result["html"]).read_text())
    assert "Ignored incoming folder(s) with unsafe names: 'a..b', 'bad\\u202ename'" in text


def test_unsafe_model_name_and_evaluation_version_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "n.yaml").write_text(json.dumps({"model_name": "../m", "workspace": "ws", "s3": {"bucket": "b"}}))
    with pytest.raises(NightlyConfigError, match="invalid model name"):
        load_nightly_config(tmp_path / "n.yaml", {})
    with pytest.raises(NightlyConfigError, match="invalid evaluation version"):
        load_nightly_config(tmp_path / "n.yaml", {"MAVIAS_NIGHTLY__MODEL_NAME": "m",
                                                  "MAVIAS_NIGHTLY__EVALUATION__VERSION": "../../v1"})


# -- 4. corrupt and empty production pointers -------------------------------------------------------------------------


def _publish(registry: ModelRegistry, folder: Path, *versions: str, passed: bool = True) -> None:
    for version in versions:
        write_local_partition(folder / version, ["car"])
        (folder / version / "gates.json").write_text(json.dumps({"passed": passed}))
        registry.publish_version(folder / version, version)


def _record(seq: int, version: str) -> dict:
    return {"seq": seq, "version": version, "action": "promote", "previous_version": None,
            "at": "2025-01-01T00:00:00+00:00", "by": "test", "token": f"t{seq}"}


CORRUPT_POINTERS = {
    "truncated": b'{"name": "m", "history": [{"seq": 1, "vers',
    "empty object": b"{}",
    "bad record": json.dumps({"name": "m", "history": [_record(1, "v1"), {"seq": 2, "version": 7}]}).encode(),
    "traversal": json.dumps({"name": "m", "history": [_record(1, "../../etc")]}).encode(),
}


@pytest.mark.parametrize("kind", CORRUPT_POINTERS)
def test_corrupt_pointer_is_explained_and_repaired(
    kind: str, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    registry = ModelRegistry(s3_client, s3_settings, "m")
    _publish(registry, tmp_path, "v1", "v2")
    _publish(registry, tmp_path, "v3", passed=False)
    s3_client.put_object(Bucket=s3_settings.bucket, Key=registry.pointer_key, Body=CORRUPT_POINTERS[kind])
    with pytest.raises(CorruptPointer, match="mavias registry repair"):
        registry.production()
    with pytest.raises(CorruptPointer):
        registry.rollback()

    runner, env = CliRunner(), {f"MAVIAS_S3_{k.upper()}": v for k, v in _env(s3_settings).items()}
    shown = runner.invoke(registry_cli, ["show", "--name", "m"], env=env)
    assert shown.exit_code == 1 and "corrupt" in shown.output and "mavias registry repair" in shown.output
    assert "Traceback" not in shown.output
    repaired = runner.invoke(registry_cli, ["repair", "--name", "m"], env=env)
    assert repaired.exit_code == 0, repaired.output
    expected = "v1" if kind == "bad record" else "v2"  # the readable record is kept, else the newest passed version
    assert registry.production().version == expected and f"production: {expected}" in repaired.output
    assert registry.repair() == registry.production()  # a valid pointer is left alone


def _env(settings: S3Settings) -> dict[str, str]:
    return {"bucket": settings.bucket, "endpoint_url": settings.endpoint_url, "access_key_id": "testing",
            "secret_access_key": "testing"}


def test_promote_on_a_corrupt_pointer_is_refused_with_the_reason(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    registry = ModelRegistry(s3_client, s3_settings, "m")
    _publish(registry, tmp_path, "v1")
    s3_client.put_object(Bucket=s3_settings.bucket, Key=registry.pointer_key, Body=b"{")
    cfg = _config(s3_settings, tmp_path / "ws")
    promoted = release.promote(cfg, {"version": "v1", "uri": "u"}, {"production_etag": None, "production_version": None})
    assert not promoted["promoted"] and "corrupt" in promoted["reason"]
    assert get_json(s3_client, s3_settings, "models/m/v1/_version.json") is not None


# -- 5, 6, 8. the report: corrupt pointer, S3 outage, SMTP outage, a rerun --------------------------------------------


def _results(night: str, *, promoted: bool = False) -> dict:
    results: dict = {"sensed": {"night": night, "date": "2025-04-01", "new": [], "processed": []}}
    if promoted:
        results["promoted"] = {"version": "v1", "promoted": True, "reason": "", "uri": "s3://b/models/m/v1/"}
    return results


def _report(cfg: NightlyConfig, smtp: SmtpSettings | None, run: str | None = None, **results: object) -> dict:
    """The report task, then the notify task, as the DAG runs them: the report's result with what notify sent."""
    reported = report.report(cfg, _results("20250401T000000", **results), trained=False,
                             decision="no new partitions since the last run: nothing was trained tonight", smtp=smtp,
                             run=run)
    try:
        sent = report.notify(cfg, smtp)["sent"]
    except report.NotificationFailed:
        sent = []
    return {**reported, "sent": sent}


def _smtp(port: int) -> SmtpSettings:
    return SmtpSettings(host="127.0.0.1", port=port, security="none", from_addr="mavias@localhost", timeout=2,
                        max_attempts=2, retry_wait_s=0)


def _report_config(settings: S3Settings, workspace: Path) -> NightlyConfig:
    return NightlyConfig(model_name="m", s3=settings, workspace=workspace,
                         report={"recipients": ["ml@example.com"]})


def test_report_on_a_corrupt_pointer_goes_out_and_says_what_is_wrong(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    s3_client.put_object(Bucket=s3_settings.bucket, Key="models/m/production.json", Body=b"{}")
    with smtp_server(tmp_path / "mail") as port:
        result = _report(_report_config(s3_settings, tmp_path / "ws"), _smtp(port))
    assert result["recipients"] == ["ml@example.com"] and result["sent"] == [result["queued"]] and result["uploaded"]
    page = Path(result["html"]).read_text()
    assert "is corrupt" in page and "mavias registry repair" in page
    assert result["failure"] == "FAILED: the production pointer is corrupt, so nothing can be promoted"
    (mail,) = (tmp_path / "mail").glob("*.eml")
    assert b"FAILED, corrupt production pointer" in mail.read_bytes()


def test_report_during_an_s3_outage_is_emailed_from_local_state_and_uploaded_later(
    faulty_proxy: FaultInjectingProxy, s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    settings = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url, **FAST_FAIL})
    cfg = _report_config(settings, tmp_path / "ws")
    with smtp_server(tmp_path / "mail") as port:
        faulty_proxy.go_down()
        offline = _report(cfg, _smtp(port))
        faulty_proxy.come_back()
        assert offline["sent"] == [offline["queued"]] and not offline["uploaded"]
        assert "the bucket was unreachable" in Path(offline["html"]).read_text()
        first = Path(offline["html"]).read_bytes()

        rerun = _report(cfg, _smtp(port))  # the cleared night, S3 back: a new attempt, and attempt 1 uploaded too
        mails = sorted((tmp_path / "mail").glob("*.eml"))
    assert (offline["attempt"], rerun["attempt"]) == (1, 2) and rerun["uploaded"]
    assert Path(offline["html"]).read_bytes() == first  # never overwritten
    for attempt in (1, 2):
        key = f"models/m/reports/20250401T000000/attempt-{attempt}/report.html"
        assert s3_client.get_object(Bucket=s3_settings.bucket, Key=key)["Body"].read()
    assert len(mails) == 2 and b"rerun, attempt 2" in mails[1].read_bytes()


def test_rerun_of_a_promoted_night_says_so_instead_of_not_promoted(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg = _report_config(s3_settings, tmp_path / "ws")
    with smtp_server(tmp_path / "mail") as port:
        first = _report(cfg, _smtp(port), promoted=True)
        rerun = _report(cfg, _smtp(port))
    assert first["promoted"] and not rerun["promoted"]
    from email import policy
    from email.parser import BytesParser

    subjects = [BytesParser(policy=policy.default).parsebytes(p.read_bytes())["Subject"]
                for p in sorted((tmp_path / "mail").glob("*.eml"))]
    assert "NOT promoted" not in subjects[1]
    assert "rerun" in subjects[1] and "original outcome" in subjects[1] and "promoted" in subjects[1]


def test_smtp_failure_after_promotion_queues_the_notification_and_sends_it_later(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg = _report_config(s3_settings, tmp_path / "ws")
    result = _report(cfg, _smtp(free_port()), promoted=True)  # nothing listens on that port
    assert result["status"] == "promoted" and result["queued"] and result["sent"] == []
    assert len(list((tmp_path / "ws" / "outbox").glob("*.eml"))) == 1
    with pytest.raises(report.NotificationFailed, match="kept in"):
        report.notify(cfg, _smtp(free_port()))
    with smtp_server(tmp_path / "mail") as port:
        sent = report.notify(cfg, _smtp(port))
    assert sent["sent"] == ["20250401T000000-attempt-1"]
    assert list((tmp_path / "ws" / "outbox").glob("*.eml")) == []
    (mail,) = (tmp_path / "mail").glob("*.eml")
    assert b"promoted" in mail.read_bytes()


def test_a_report_task_retried_before_its_email_went_out_is_emailed_once_and_a_rerun_of_the_night_twice(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg = _report_config(s3_settings, tmp_path / "ws")
    first = _report(cfg, _smtp(free_port()), "run-1", promoted=True)  # queued, not sent: nothing listens there
    again = _report(cfg, _smtp(free_port()), "run-1", promoted=True)  # the same run's report task retried
    assert (first["queued"], again["queued"]) == ("20250401T000000-attempt-1", "20250401T000000-attempt-2")
    assert layout.layout(cfg).outbox.pending() == [again["queued"]]
    rerun = _report(cfg, _smtp(free_port()), "run-2")  # the night run again: its own email, beside the first
    assert layout.layout(cfg).outbox.pending() == [again["queued"], rerun["queued"]]
    with smtp_server(tmp_path / "mail") as port:
        assert report.notify(cfg, _smtp(port))["sent"] == [again["queued"], rerun["queued"]]
    assert b"rerun, attempt 3" in sorted((tmp_path / "mail").glob("*.eml"))[1].read_bytes()


def test_a_report_made_while_the_smtp_connection_cannot_be_read_is_queued_and_sent_with_its_sender_later(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg = _report_config(s3_settings, tmp_path / "ws")
    result = _report(cfg, None)  # the connection lookup failed: Airflow's SDK answers "not found"
    assert result["queued"] and result["sent"] == []
    with pytest.raises(report.NotificationFailed, match="'smtp_default' is missing or could not be read"):
        report.notify(cfg, None)
    with smtp_server(tmp_path / "mail") as port:
        assert report.notify(cfg, _smtp(port))["sent"] == [result["queued"]]
    (mail,) = (tmp_path / "mail").glob("*.eml")
    assert b"From: mavias@localhost" in mail.read_bytes()
