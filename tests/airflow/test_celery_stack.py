"""The CeleryExecutor stack, `mavias airflow up --executor celery`, all started by the test on 127.0.0.1: PostgreSQL
15 (as the `postgres` account when the tests run as root, in a temporary data folder), Redis 7, api-server,
scheduler, dag-processor, a Celery worker on the default queue and one on the `gpu` queue.

One full night on tiny data, with training spread over two gloo processes (`train.nproc: 2`, DDP):
- it completes: trained, gated, promoted, reported and emailed, as in the demo;
- the task instances say where they ran: those of the `gpu` queue on the gpu worker, the others on the default one;
- the gpu worker is SIGKILLed, with every process it started, while train_reference trains: after the heartbeat
  timeout the task is retried on the worker that `up` (idempotent) restarts, and the night completes with one
  version in the registry and one promotion.
Bad input (no stack needed): a port in use, a broker or a database that does not answer.

Wall time on two cores, loaded: about 7-13 minutes for the module (start ≈ 1-2 min, the night ≈ 5 min with
the 30 s heartbeat timeout). Bounded: the stack's start, the kill and the night share one budget (NIGHT_BUDGET_S),
under pytest-timeout's 1800 s for the module's first test; the stack is stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from mavias.cli import app
from mavias.errors import UserError
from mavias.ops.airflow_stack import stack as local_airflow
from mavias.utils.servers import free_port
from tests.airflow.api import Api
from tests.airflow.harness import TEST_TRAINING, Deployment, stack_deployment
from tests.support.s3server import moto_endpoint  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

NIGHT_BUDGET_S = 1500  # from nothing to the night's end: up, the DAG parsed, the kill, up again, the run
HEARTBEAT_TIMEOUT_S = 30
GPU_TASKS = {"tag_shard", "train_reference", "tune_trial"}
TRAINING = TEST_TRAINING | {"image_size": 16, "epochs": 3, "backbone.width": 8}


@dataclass
class CeleryNight:
    deployment: Deployment
    home: Path
    state: str
    tasks: list[dict]
    ranks_killed: int
    restarted: list[str]  # by `up` after the kill
    started_again: list[str]  # by `up` on the whole running stack
    seconds: float


def _processes_of(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _kill_when_training(home: Path, timeout_s: float) -> int:
    """SIGKILL the gpu worker and everything it started once the ranks of a distributed training run under it
    (a GPU node lost mid-task); the number of ranks killed."""
    worker = local_airflow.read_state(home)["components"]["worker-gpu"]["pid"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tree = _processes_of(worker)
        ranks = [p for p in tree if _is_rank(_cmdline(p))]
        if len(ranks) == 2:
            for process in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            psutil.wait_procs(tree, timeout=10)
            return len(ranks)
        time.sleep(0.2)
    raise AssertionError("no distributed training started on the gpu worker in time")


def _is_rank(cmdline: list[str]) -> bool:
    """A training process started by torch's launcher (``python -u -m mavias.core.train.distributed JOB``), not the
    launcher itself (``python -m torch.distributed.run ... -m mavias.core.train.distributed JOB``)."""
    return "mavias.core.train.distributed" in cmdline and "torch.distributed.run" not in cmdline


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str) -> Iterator[CeleryNight]:  # noqa: F811
    root = tmp_path_factory.mktemp("celery")
    with stack_deployment(root, moto_endpoint, train={"overrides": TRAINING, "nproc": 2},
                          discovery={"tagger": "manifest", "num_shards": 1, "batch_size": 32},
                          airflow={"schedule": None, "retries": 2, "retry_delay_s": 1}) as deployment:
        home = root / "airflow"
        options = {"port": free_port(), "smtp": ("127.0.0.1", deployment.smtp_port), "executor": "celery",
                   "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S}
        deadline = time.monotonic() + NIGHT_BUDGET_S

        def left() -> float:
            return max(1.0, deadline - time.monotonic())

        try:  # also when pytest-timeout stops the first `up` midway
            stack = local_airflow.up(home, root / "nightly.yaml", **options, timeout_s=left())
            api = Api(stack.url)
            api.wait_for_dag(left())
            started = time.monotonic()
            run_id = api.trigger("2025-06-01T00:00:00Z")
            ranks = _kill_when_training(home, left())
            restarted = local_airflow.up(home, root / "nightly.yaml", **options, timeout_s=left()).started
            state = api.wait(run_id, left())
            seconds = time.monotonic() - started
            again = local_airflow.up(home, root / "nightly.yaml", **options).started
            yield CeleryNight(deployment, home, state, api.task_instances(run_id), ranks, restarted, again, seconds)
        finally:
            local_airflow.down(home)


def _task(night: CeleryNight, task_id: str) -> dict:
    return next(t for t in night.tasks if t["task_id"] == task_id and t["map_index"] < 0)


def test_a_night_on_celery_workers_completes_promoted_and_reported(night: CeleryNight) -> None:
    print(f"one night on the Celery stack, a worker killed: {night.seconds:.0f} s")  # noqa: T201 - BENCHMARKS.md
    states = {t["task_id"]: t["state"] for t in night.tasks if t["map_index"] < 0}
    assert night.state == "success", states
    for task_id in ("train_reference", "train_mavias", "quality_gates", "publish", "promote", "report", "notify"):
        assert states[task_id] == "success", task_id
    production = night.deployment.registry.production()
    assert production is not None and production.version == night.deployment.registry.versions()[0]
    subject = night.deployment.emails()[-1]["Subject"]
    assert production.version in subject and "promoted" in subject and "NOT promoted" not in subject


def test_gpu_queue_tasks_ran_on_the_gpu_worker_and_the_rest_on_the_default_worker(night: CeleryNight) -> None:
    ran = [t for t in night.tasks if t["state"] == "success"]
    on_gpu = {t["task_id"] for t in ran if t["queue"] == "gpu"}
    assert on_gpu == GPU_TASKS  # the DAG's routing, read from the task instances
    for ti in ran:
        worker = "gpu" if ti["queue"] == "gpu" else "default"
        assert ti["hostname"].startswith(f"{worker}-worker@"), (ti["task_id"], ti["queue"], ti["hostname"])


def test_a_killed_worker_is_survived_nothing_lost_or_duplicated(night: CeleryNight) -> None:
    assert night.ranks_killed == 2 and night.restarted == ["worker-gpu"] and night.started_again == []
    assert _task(night, "train_reference")["try_number"] == 2  # the killed try failed on its heartbeat, then retried
    registry = night.deployment.registry
    assert len(registry.versions()) == 1
    assert [record.version for record in registry.history()] == registry.versions()
    assert len(night.deployment.emails()) == 1


def test_a_port_in_use_names_the_api_server(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["airflow", "up", "--executor", "celery", "--home", str(tmp_path),
                                          "--port", str(port)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"port {port} on 127.0.0.1 is in use and the Airflow api-server needs it" in result.output
    assert "--port" in result.output and not (tmp_path / local_airflow.STATE_NAME).exists()


def test_a_broker_that_does_not_answer_names_the_broker(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = CliRunner().invoke(app, ["airflow", "up", "--executor", "celery", "--home", str(tmp_path),
                                      "--port", str(free_port()), "--broker-url", url])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "the Celery broker (Redis at 127.0.0.1:" in result.output and "fix --broker-url" in result.output
    assert not (tmp_path / local_airflow.STATE_NAME).exists()


def test_a_database_not_yet_up_is_waited_for_then_named(tmp_path: Path) -> None:
    url = f"postgresql://airflow:secret@127.0.0.1:{free_port()}/airflow"
    started = time.monotonic()
    with pytest.raises(UserError, match=r"metadata database \(PostgreSQL at 127\.0\.0\.1:\d+\) did not answer within "
                                        r"3 s .*start it, or fix --database-url"):
        local_airflow.up(tmp_path, port=free_port(), executor="celery", database_url=url, database_wait_s=3)
    assert 3 <= time.monotonic() - started < 30
