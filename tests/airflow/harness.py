"""A throw-away deployment of the nightly DAG for tests: real ``airflow dags test`` processes against the session's
moto_server and an aiosmtpd server, each deployment with its own bucket, workspace and nightly config.

Every module gets its own deployment but the session shares one migrated metadata DB, so modules must use
different logical dates (``airflow dags test`` replaces the run of the same date).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from pydantic import SecretStr

from mavias.ops.registry import ModelRegistry
from mavias.storage.s3 import S3Settings, make_s3_client
from mavias.tools.demo.run import DemoData, make_demo_data, upload_manifest_folder
from mavias.tools.demo.services import AIRFLOW_COMMAND, DAG_ID, airflow_environment, read_night, smtp_server
from tests.support.s3server import create_bucket

NIGHT_TIMEOUT_S = 900  # a hang guard: a night takes 30-300 s on two cores, more while other tests load them
GATES = Path(__file__).with_name("gates_test.yaml")
CREDENTIALS = {"access_key_id": SecretStr("testing"), "secret_access_key": SecretStr("testing")}
# Every setting pinned (none left to the recipe): the tests exercise the nightly flow on a tiny model, not the recipe
# Small fixed settings without augmentation, so MAVias keeps the paper's joint bias path: the experts one needs
# augmentation (BENCHMARKS.md, "Why MAVias trailed JTT").
TEST_TRAINING = {"image_size": 32, "epochs": 8, "batch_size": 32, "backbone.width": 16, "optim.name": "adam",
                 "optim.lr": 0.005, "optim.weight_decay": 1e-4, "optim.schedule": "none",
                 "preprocessing.augment": False, "preprocessing.flip": False, "mavias.bias_path": "joint",
                 "selection": "val_acc", "device": "cpu"}


@dataclass
class Night:
    returncode: int
    tasks: pd.DataFrame  # task_id, map_index, state, duration_s
    results: dict[str, Any]  # task id -> return value
    log: Path

    def state(self, task_id: str) -> str | None:
        states = self.tasks.loc[self.tasks["task_id"] == task_id, "state"]
        return None if states.empty else states.iloc[0]


@dataclass
class Deployment:
    root: Path
    settings: S3Settings
    env: dict[str, str]
    mail_dir: Path
    config: dict[str, Any] = field(default_factory=dict)
    smtp_port: int | None = None

    @property
    def client(self):  # noqa: ANN201 - boto3 client
        return make_s3_client(self.settings)

    @property
    def registry(self) -> ModelRegistry:
        return ModelRegistry(self.client, self.settings, self.config["model_name"])

    @property
    def workspace(self) -> Path:
        return Path(self.config["workspace"])

    def upload(self, prefix: str, data: DemoData, rows: pd.DataFrame, name: str) -> None:
        upload_manifest_folder(self.client, self.settings, prefix, data.root, rows, self.root / "staging" / name)

    def emails(self) -> list[EmailMessage]:
        return [BytesParser(policy=policy.default).parsebytes(p.read_bytes()) for p in sorted(self.mail_dir.glob("*.eml"))]

    def start_night(self, day: date, *, conf: dict | None = None, env: dict[str, str] | None = None,
                    log_name: str | None = None) -> tuple[subprocess.Popen, Path]:
        log_path = self.root / "logs" / f"{log_name or day.isoformat()}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        args = [*AIRFLOW_COMMAND, "dags", "test", DAG_ID, day.isoformat()]
        if conf is not None:
            args += ["--conf", json.dumps(conf)]
        with log_path.open("w") as log:
            # Its own session, so that a test can kill the night's whole process group (a worker dying).
            process = subprocess.Popen(args, env=self.env | (env or {}), stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        return process, log_path

    def run_night(self, day: date, **kwargs: Any) -> Night:
        process, log_path = self.start_night(day, **kwargs)
        try:
            returncode = process.wait(timeout=NIGHT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_group(process)
            raise
        tasks, results = read_night(Path(self.env["AIRFLOW_HOME"]) / "airflow.db", day)
        return Night(returncode, tasks, results, log_path)


def kill_group(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the night ended (code {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            kill_group(process)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def make_deployment(root: Path, airflow_home: Path, endpoint: str, bucket: str, smtp_port: int,
                    **config_overrides: Any) -> Deployment:
    settings = S3Settings(bucket=bucket, endpoint_url=endpoint, **CREDENTIALS)
    config = {
        "model_name": "scenes-test",
        "workspace": str(root / "workspace"),
        "s3": {"bucket": bucket, "endpoint_url": endpoint},
        "train": {"overrides": TEST_TRAINING},
        "discovery": {"tagger": "manifest", "num_shards": 2, "batch_size": 16},
        "evaluation": {"version": "v1", "n_boot": 50},
        "gates": str(GATES),
        "report": {"recipients": ["ml-team@example.com"], "latency_runs": 3},
        "airflow": {"retries": 2, "retry_delay_s": 1, "max_retry_delay_s": 4},
    } | config_overrides
    config_path = root / "nightly.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = airflow_environment(airflow_home, config_path, endpoint, smtp_port)
    return Deployment(root, settings, env, root / "mail", config)


@contextmanager
def stack_deployment(root: Path, endpoint: str, **config_overrides: Any) -> Iterator[Deployment]:
    """A deployment for a stack of `mavias airflow up` (its connections come from the nightly config, credentials
    from the environment) with one partition, ``incoming/night-1/``, of tiny synthetic scenes and the evaluation set uploaded."""
    scenes = make_demo_data(root / "scenes", n_train=60, n_val=24, n_test_per_cell=1, nights=1)
    with smtp_server(root / "mail") as smtp_port, pytest.MonkeyPatch.context() as patch:
        deployment = make_deployment(
            root, root / "unused-home", endpoint, create_bucket(endpoint), smtp_port, gates=str(GATES),
            evaluation={"version": "v1", "n_boot": 20}, **config_overrides,
        )
        patch.setenv("MAVIAS_S3_ACCESS_KEY_ID", "testing")  # credentials from the environment, never the config file
        patch.setenv("MAVIAS_S3_SECRET_ACCESS_KEY", "testing")
        deployment.upload("evaluation/v1/", scenes, scenes.evaluation, "evaluation")
        deployment.upload("incoming/night-1/", scenes, scenes.partitions["night-1"], "night-1")
        deployment.smtp_port = smtp_port
        yield deployment
