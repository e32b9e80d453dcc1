"""Faults. In one night a partition with an unknown class and an empty partition fail validation, so they are
quarantined, nothing is trained and the report says why; meanwhile the S3 endpoint (a proxy in front of
moto_server) answers 503 SlowDown to a burst of requests, longer than botocore's own retries: the task fails once
and its Airflow retry succeeds. The next night a task fails for good: the report is still sent, the run fails."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest

from mavias.demo.run import DemoData
from mavias.nightly.incoming import ProcessedLedger
from mavias.registry.storage import get_json
from tests.airflow.conftest import deploy
from tests.airflow.harness import Deployment, Night
from tests.pipeline.s3server import FaultInjectingProxy

pytestmark = pytest.mark.slow

NIGHT, BROKEN_NIGHT = date(2025, 2, 1), date(2025, 2, 2)
GET_FAILURES, PUT_FAILURES = 6, 2  # botocore makes 5 attempts per request (S3Settings.max_attempts)


@dataclass
class FaultyNight:
    deployment: Deployment
    night: Night
    failures_served: int


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory, airflow_home: Path, moto_endpoint: str,
           scenes: DemoData) -> Iterator[FaultyNight]:
    proxy = FaultInjectingProxy(moto_endpoint)
    try:
        with deploy(tmp_path_factory.mktemp("faults"), airflow_home, proxy.endpoint_url, scenes) as d:
            rows = scenes.partitions["night-1"].head(20)
            d.upload("incoming/unknown-class/", scenes, rows.assign(label=["zebra", *rows["label"][1:]]), "unknown")
            d.upload("incoming/empty/", scenes, rows.iloc[:0], "empty")
            proxy.fail_next(GET_FAILURES, 503, method="GET")
            proxy.fail_next(PUT_FAILURES, 503, method="PUT")
            yield FaultyNight(d, d.run_night(NIGHT), proxy.failures_served)
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def broken(faulty: FaultyNight) -> Night:
    """A night whose evaluation set does not exist: pull_and_validate fails on every try."""
    return faulty.deployment.run_night(BROKEN_NIGHT, env={"MAVIAS_NIGHTLY__EVALUATION__VERSION": "missing"})


def test_night_completes_despite_transient_s3_errors(faulty: FaultyNight) -> None:
    assert faulty.night.returncode == 0, faulty.night.log
    assert faulty.failures_served == GET_FAILURES + PUT_FAILURES
    assert faulty.night.tasks["try_number"].max() == 2  # one task outlasted botocore's retries, its retry passed
    assert faulty.night.state("finish") == "success"


def test_failed_partitions_are_quarantined_with_their_validation_result(faulty: FaultyNight) -> None:
    d = faulty.deployment
    ledger = ProcessedLedger(d.client, d.settings)
    assert ledger.quarantined() == {"unknown-class", "empty"}
    assert ledger.processed() == set()
    failed = {p: get_json(d.client, d.settings, f"quarantine/{p}/validation.json")[0]["failed"] for p in ("unknown-class", "empty")}
    assert "labels_known_classes" in failed["unknown-class"]
    assert "non_empty" in failed["empty"]


def test_nothing_is_trained(faulty: FaultyNight) -> None:
    for task_id in ("plan_tagging", "discover", "prepare_dataset", "train_reference", "train_mavias", "promote"):
        assert faulty.night.state(task_id) == "skipped", task_id
    assert not (faulty.deployment.workspace / "training").exists()
    assert faulty.deployment.registry.production() is None


def test_report_says_why(faulty: FaultyNight) -> None:
    email = faulty.deployment.emails()[0]
    assert "NOT promoted" in email["Subject"]
    html = email.get_body(("html",)).get_content()
    for expected in ("unknown-class", "labels_known_classes", "zebra", "empty", "non_empty", "nothing was trained"):
        assert expected in html, expected


def test_a_failed_task_still_sends_the_report_and_fails_the_run(faulty: FaultyNight, broken: Night) -> None:
    assert broken.returncode != 0
    assert broken.state("pull_and_validate") == "failed"
    assert broken.tasks.loc[broken.tasks["task_id"] == "pull_and_validate", "try_number"].item() == 3  # 2 retries
    assert broken.state("report") == "success" and broken.state("finish") == "failed"
    html = faulty.deployment.emails()[-1].get_body(("html",)).get_content()
    assert "could not be pulled or validated" in html
