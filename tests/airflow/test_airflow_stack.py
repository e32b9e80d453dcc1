"""The real stack: `mavias airflow up` (api-server, dag-processor, scheduler, LocalExecutor on SQLite, every task
in its own process, connections and pool from the nightly config) runs nights triggered through the REST API,
on 127.0.0.1 against moto_server and aiosmtpd, with tiny data.

- without the `gpu` pool, the preflight fails the night in seconds with what to do (no task waits forever), also
  in a manual run without a logical date;
- with it, one night runs to the end: trained, gated, reported and emailed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mavias.ops.airflow_stack import stack as local_airflow
from mavias.utils.servers import free_port
from tests.airflow.api import Api
from tests.airflow.harness import TEST_TRAINING, stack_deployment
from tests.support.s3server import moto_endpoint  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 900
TRAINING = TEST_TRAINING | {"image_size": 16, "epochs": 2, "backbone.width": 8}


def _airflow_cli(home: Path, *args: str) -> None:
    env_file = home / local_airflow.ENV_NAME
    subprocess.run(["bash", "-c", f'source "{env_file}" && "{sys.executable}" -m airflow "$@"', "_", *args],
                   check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str) -> Iterator[tuple]:  # noqa: F811
    root = tmp_path_factory.mktemp("stack")
    with stack_deployment(root, moto_endpoint, train={"overrides": TRAINING}, airflow={"schedule": None, "retries": 0},
                          discovery={"tagger": "manifest", "num_shards": 1, "batch_size": 32}) as deployment:
        home = root / "airflow"
        started = local_airflow.up(home, root / "nightly.yaml", port=free_port(),
                                   smtp=("127.0.0.1", deployment.smtp_port))
        try:
            api = Api(started.url)
            api.wait_for_dag()
            yield deployment, home, api
        finally:
            local_airflow.down(home)


def test_missing_pool_fails_the_night_fast_with_what_to_do(stack: tuple) -> None:
    deployment, home, api = stack
    _airflow_cli(home, "pools", "delete", "gpu")
    try:
        state, tasks, seconds = api.run_night(None, RUN_TIMEOUT_S)  # as `airflow dags trigger` without a date
    finally:
        _airflow_cli(home, "pools", "set", "gpu", "1", "GPU workers")
    assert state == "failed" and tasks["preflight"] == "failed"
    assert tasks["sense"] == "upstream_failed" and tasks["report"] == "success"
    logs = "".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*task_id=preflight*/*.log"))
    assert "pool 'gpu' does not exist" in logs and "airflow pools set gpu" in logs
    email = deployment.emails()[-1]
    html = email.get_body(("html",)).get_content()
    assert "FAILED: the night could not start (preflight check)" in html and "airflow pools set gpu" in html
    assert "FAILED, the night could not start" in email["Subject"]


def test_one_night_runs_to_the_end_under_the_scheduler(stack: tuple) -> None:
    deployment, _, api = stack
    state, tasks, seconds = api.run_night("2025-05-02T00:00:00Z", RUN_TIMEOUT_S)
    assert state == "success", tasks
    for task_id in ("preflight", "sense", "train_reference", "train_mavias", "evaluate", "quality_gates", "report",
                    "notify", "finish"):
        assert tasks[task_id] == "success", task_id
    assert "mavias" in deployment.emails()[-1]["Subject"]
    print(f"one night under the scheduler: {seconds:.0f} s")  # noqa: T201 - quoted in BENCHMARKS.md


def test_every_port_the_stack_opens_is_on_loopback(stack: tuple) -> None:
    """The stack's processes listen on 127.0.0.1 only (Airflow's scheduler log server would bind every interface)."""
    import ipaddress

    import psutil

    _, home, _ = stack
    pids = set()
    for entry in local_airflow.read_state(home)["components"].values():
        process = psutil.Process(local_airflow.pid_of(entry))
        pids |= {process.pid, *(child.pid for child in process.children(recursive=True))}
    listening = [c for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening, "the api-server listens"
    assert all(ipaddress.ip_address(c.laddr.ip).is_loopback for c in listening), listening
