"""The real stack: `mavias airflow up` (api-server, dag-processor, scheduler, LocalExecutor on SQLite, every task
in its own process, connections and pool from the nightly config) runs nights triggered through the REST API,
on 127.0.0.1 against moto_server and aiosmtpd, with tiny data.

- without the `gpu` pool, the preflight fails the night in seconds with what to do (no task waits forever);
- with it, one night runs to the end: trained, gated, reported and emailed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mavias.demo.run import make_demo_data
from mavias.demo.services import DAG_ID, smtp_server
from mavias.nightly import local_airflow
from mavias.utils.servers import free_port
from tests.airflow.harness import GATES, TEST_TRAINING, make_deployment
from tests.pipeline.s3server import create_bucket, moto_endpoint  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 420
TRAINING = TEST_TRAINING | {"image_size": 16, "epochs": 2, "backbone.width": 8}


class Api:
    """The stack's REST API (the simple auth manager lets everybody in as admin on this local stack)."""

    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=30)
        token = self.client.get("/auth/token").json()["access_token"]
        self.client.headers["Authorization"] = f"Bearer {token}"

    def wait_for_dag(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while self.client.get(f"/api/v2/dags/{DAG_ID}").status_code != 200:
            assert time.monotonic() < deadline, "the dag-processor did not parse the DAG in time"
            time.sleep(2)

    def run_night(self, logical_date: str) -> tuple[str, dict[str, str], float]:
        """Trigger a run and poll it to its end; (state, task states, seconds)."""
        started = time.monotonic()
        reply = self.client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": logical_date, "conf": {}})
        reply.raise_for_status()
        run_id = reply.json()["dag_run_id"]
        while (state := self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").json()["state"]) not in (
            "success", "failed"
        ):
            assert time.monotonic() - started < RUN_TIMEOUT_S, f"run {run_id} still {state}"
            time.sleep(2)
        tasks = self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
        return state, {t["task_id"]: t["state"] for t in tasks if t["map_index"] < 0}, time.monotonic() - started


def _airflow_cli(home: Path, *args: str) -> None:
    env_file = home / local_airflow.ENV_NAME
    subprocess.run(["bash", "-c", f'source "{env_file}" && "{sys.executable}" -m airflow "$@"', "_", *args],
                   check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str) -> Iterator[tuple]:  # noqa: F811
    root = tmp_path_factory.mktemp("stack")
    scenes = make_demo_data(root / "scenes", n_train=60, n_val=24, n_test_per_cell=1, nights=1)
    with smtp_server(root / "mail") as smtp_port:
        deployment = make_deployment(
            root, root / "unused-home", moto_endpoint, create_bucket(moto_endpoint), smtp_port,
            train={"overrides": TRAINING}, discovery={"tagger": "manifest", "num_shards": 1, "batch_size": 32},
            evaluation={"version": "v1", "n_boot": 20}, gates=str(GATES),
            airflow={"schedule": None, "retries": 0},
        )
        deployment.upload("evaluation/v1/", scenes, scenes.evaluation, "evaluation")
        deployment.upload("incoming/night-1/", scenes, scenes.partitions["night-1"], "night-1")
        home = root / "airflow"
        with pytest.MonkeyPatch.context() as patch:  # credentials from the environment, never the config file
            patch.setenv("MAVIAS_S3_ACCESS_KEY_ID", "testing")
            patch.setenv("MAVIAS_S3_SECRET_ACCESS_KEY", "testing")
            started = local_airflow.up(home, root / "nightly.yaml", port=free_port(), smtp=("127.0.0.1", smtp_port))
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
        state, tasks, seconds = api.run_night("2025-05-01T00:00:00Z")
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
    state, tasks, seconds = api.run_night("2025-05-02T00:00:00Z")
    assert state == "success", tasks
    for task_id in ("preflight", "sense", "train_reference", "train_mavias", "evaluate", "quality_gates", "report",
                    "notify", "finish"):
        assert tasks[task_id] == "success", task_id
    assert "mavias" in deployment.emails()[-1]["Subject"]
    print(f"one night under the scheduler: {seconds:.0f} s")  # noqa: T201 - quoted in BENCHMARKS.md
