"""The demo's local services on 127.0.0.1: an S3-compatible server (moto_server, a subprocess), an SMTP server
(aiosmtpd, every message saved as ``.eml``), and nights of the DAG run with ``airflow dags test`` (SQLite metadata
DB, ``AIRFLOW_HOME`` in the work folder, examples off)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import SecretStr

from mavias.errors import ExplainedFailure
from mavias.ops.airflow_stack.stack import DAGS_FOLDER, PLUGINS_FOLDER, python_path
from mavias.storage.s3 import S3Settings
from mavias.utils.servers import SERVE_MOTO, free_port, stop_process, wait_until_answering

DAG_ID = "mavias_nightly"
CREDENTIALS = {"access_key_id": "demo", "secret_access_key": "demo-secret"}  # moto accepts any; nothing real


def demo_s3_settings(bucket: str, endpoint: str) -> S3Settings:
    """The settings of ``bucket`` on the demo's local S3 server at ``endpoint``, with the demo's credentials."""
    return S3Settings(bucket=bucket, endpoint_url=endpoint, **{k: SecretStr(v) for k, v in CREDENTIALS.items()})


@contextmanager
def moto_server(log_path: Path, timeout_s: float = 30.0) -> Iterator[str]:
    """A moto_server subprocess on 127.0.0.1; yields its endpoint URL and stops it on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVE_MOTO, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_until_answering(url, process, timeout_s=timeout_s, log_path=log_path)
        yield url
    finally:
        stop_process(process)


class _SaveMessages:
    """aiosmtpd handler: every message is written to ``folder`` as ``<n>.eml``."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        index = len(list(self.folder.glob("*.eml"))) + 1
        (self.folder / f"{index:03d}.eml").write_bytes(envelope.original_content or envelope.content)
        return "250 Message accepted for delivery"


@contextmanager
def smtp_server(mail_dir: Path) -> Iterator[int]:
    """An SMTP server on 127.0.0.1 (aiosmtpd, in a thread) saving what it receives; yields its port."""
    from aiosmtpd.controller import Controller

    controller = Controller(_SaveMessages(mail_dir), hostname="127.0.0.1", port=free_port(), loop=asyncio.new_event_loop())
    controller.start()
    try:
        yield controller.port
    finally:
        controller.stop()


def airflow_environment(home: Path, config_path: Path, s3_endpoint: str, smtp_port: int) -> dict[str, str]:
    """Environment of the ``airflow`` subprocesses: local metadata DB, this repo's DAG and plugins, connections."""
    if not (DAGS_FOLDER / "mavias_nightly.py").exists() or not (PLUGINS_FOLDER / "mavias_airflow").exists():
        raise FileNotFoundError(f"{DAGS_FOLDER} or {PLUGINS_FOLDER} not found: run the demo from a mavias checkout")
    aws = {"conn_type": "aws", "login": CREDENTIALS["access_key_id"], "password": CREDENTIALS["secret_access_key"],
           "extra": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}}
    smtp = {"conn_type": "smtp", "host": "127.0.0.1", "port": smtp_port,
            "extra": {"from_email": "mavias@localhost", "disable_ssl": True, "disable_tls": True}}
    return os.environ | {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws),
        "AIRFLOW_CONN_SMTP_DEFAULT": json.dumps(smtp),
        "MAVIAS_NIGHTLY_CONFIG": str(config_path),
        "PYTHONPATH": python_path(),
        "TQDM_DISABLE": "1",
    }


# `airflow dags test` runs every task in its own process, whose exit would then spend seconds in the interpreter's
# final garbage collections over millions of objects that the OS reclaims anyway; frozen objects are skipped (a task
# process under a real executor ends with os._exit and never pays this).
AIRFLOW_COMMAND = [sys.executable, "-c", "import atexit, gc; atexit.register(gc.freeze); "
                   "from airflow.__main__ import main; main()"]
TASK_LINE = re.compile(r"\[DAG TEST\] starting task_id=(\S+) map_index=(-?\d+)")
EPOCH_LINE = re.compile(r"\b([\w-]+ epoch \d+/\d+: .*?s)\s*$|\b([\w-]+: stopped after epoch \d+ of \d+.*?)\s*$")


def run_airflow(args: list[str], env: dict[str, str], log_path: Path,
                on_task: Callable[[str, int], None] | None = None,
                on_epoch: Callable[[str], None] | None = None) -> None:
    """``airflow <args>`` with its output in ``log_path``; ``on_task(task_id, map_index)`` as each task starts,
    ``on_epoch(line)`` for each epoch a training reports (and its early stop)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        process = subprocess.Popen([*AIRFLOW_COMMAND, *args], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in process.stdout:
            log.write(line)
            log.flush()
            match = TASK_LINE.search(line)
            if match and on_task:
                on_task(match.group(1), int(match.group(2)))
            epoch = EPOCH_LINE.search(line) if on_epoch else None
            if epoch:
                on_epoch(epoch.group(1) or epoch.group(2))
        code = process.wait()
    if code != 0:
        raise ExplainedFailure(f"airflow {' '.join(args)} failed with exit code {code}: the failed task's error is in "
                               f"{log_path} (search for 'Task failed'); fix it and run the same command again")


def airflow_setup(env: dict[str, str], logs: Path) -> None:
    run_airflow(["db", "migrate"], env, logs / "airflow-db-migrate.log")
    run_airflow(["pools", "set", "gpu", "1", "GPU workers (training, tagging)"], env, logs / "airflow-pools.log")


@dataclass
class NightRun:
    night: int
    logical_date: date
    wall_s: float
    tasks: pd.DataFrame  # task_id, map_index, state, try_number, duration_s
    results: dict[str, Any]  # task id -> its return value (XCom)


def read_night(db_path: Path, logical_date: date) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Task durations and return values of the DAG run of ``logical_date`` from Airflow's metadata DB."""
    with sqlite3.connect(db_path) as db:
        (run_id,) = db.execute(
            "SELECT run_id FROM dag_run WHERE dag_id = ? AND logical_date LIKE ?", (DAG_ID, f"{logical_date}%")
        ).fetchone()
        tasks = pd.read_sql_query(
            "SELECT task_id, map_index, state, try_number, duration AS duration_s FROM task_instance "
            "WHERE dag_id = ? AND run_id = ? ORDER BY start_date", db, params=(DAG_ID, run_id),
        )
        rows = db.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value' AND map_index < 0",
            (DAG_ID, run_id),
        ).fetchall()
    return tasks, {task_id: _xcom_value(value) for task_id, value in rows}


def _xcom_value(value: Any) -> Any:
    decoded = json.loads(value) if isinstance(value, (str, bytes)) else value
    return json.loads(decoded) if isinstance(decoded, str) else decoded
