"""``mavias airflow up`` / ``down``: the nightly DAG under a real Airflow stack on this machine.

api-server, dag-processor and scheduler (LocalExecutor, every task in its own process) on a SQLite metadata DB
in ``AIRFLOW_HOME``, all on 127.0.0.1. The ``gpu`` pool and the connections (``aws_default`` with the nightly
config's endpoint and region and the credentials of the environment, ``MAVIAS_S3_ACCESS_KEY_ID`` /
``MAVIAS_S3_SECRET_ACCESS_KEY``, never of the config file; ``smtp_default`` when an SMTP server is given;
``airflow_api`` for the DAG's preflight check) are created from them. Airflow runs in subprocesses only: this
module never imports it.

SQLite and LocalExecutor suit one machine and a few parallel tasks; a production deployment uses Postgres and
a distributed executor with the same DAG folder and plugins.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mavias.errors import UserError
from mavias.nightly.config import NightlyConfig, config_path, load_nightly_config
from mavias.utils.atomic import write_json
from mavias.utils.servers import wait_until_answering

REPO_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER, PLUGINS_FOLDER = REPO_ROOT / "dags", REPO_ROOT / "plugins"
COMPONENTS = ("api-server", "dag-processor", "scheduler")
PIDS_NAME = "mavias-stack.json"
ENV_NAME = "stack.env"  # the non-secret settings, for `airflow` commands against this stack
API_CONN_ID = "airflow_api"


@dataclass(frozen=True)
class Stack:
    home: Path
    url: str
    pids: dict[str, int]


def python_path() -> str:
    """PYTHONPATH that makes ``mavias`` importable in Airflow's processes, installed or from this checkout."""
    return os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)


def stack_settings(home: Path, config: Path, port: int, *, parallelism: int = 4) -> dict[str, str]:
    """Airflow settings of the stack (no secrets): LocalExecutor, SQLite, this checkout's DAG folder and plugins."""
    url = f"http://127.0.0.1:{port}"
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "MAVIAS_NIGHTLY_CONFIG": str(config),
        "PYTHONPATH": python_path(),
        "TQDM_DISABLE": "1",
    }


def connections(cfg: NightlyConfig, port: int, smtp: tuple[str, int] | None) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` variables of the stack's connections, built from the nightly config (whose credentials can
    only come from the environment: :func:`~mavias.nightly.config.load_nightly_config` refuses a file holding them).
    Without credentials the connection has none and the tasks use the AWS chain of their environment."""
    s3 = cfg.s3
    aws: dict = {"conn_type": "aws", "extra": {"region_name": s3.region}}
    if s3.endpoint_url:
        aws["extra"]["endpoint_url"] = s3.endpoint_url
    if s3.access_key_id and s3.secret_access_key:
        aws |= {"login": s3.access_key_id.get_secret_value(), "password": s3.secret_access_key.get_secret_value()}
    found = {cfg.airflow.aws_conn_id: aws,
             API_CONN_ID: {"conn_type": "http", "host": "127.0.0.1", "port": port, "schema": "http"}}
    if smtp is not None:
        found[cfg.airflow.smtp_conn_id] = {
            "conn_type": "smtp", "host": smtp[0], "port": smtp[1],
            "extra": {"from_email": f"mavias@{smtp[0]}", "disable_ssl": True, "disable_tls": True},
        }
    return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(value) for conn_id, value in found.items()}


def _airflow(args: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        done = subprocess.run([sys.executable, "-m", "airflow", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise UserError(f"`airflow {' '.join(args)}` failed (exit {done.returncode}); see {log}")


def up(home: Path, config: Path | None = None, *, port: int = 8080, smtp: tuple[str, int] | None = None,
       timeout_s: float = 180.0) -> Stack:
    """Migrate the DB, create the pool, start the three components in the background; return once the API
    answers. Refuses when a stack already runs in ``home``."""
    home = home.resolve()
    if (home / PIDS_NAME).exists():
        raise UserError(f"a stack already runs in {home} (stop it with `mavias airflow down --home {home}`)")
    config = config_path(config).resolve()
    cfg = load_nightly_config(config)
    (home / "logs").mkdir(parents=True, exist_ok=True)
    settings = stack_settings(home, config, port)
    (home / ENV_NAME).write_text("".join(f"export {k}={json.dumps(v)}\n" for k, v in settings.items()))
    env = os.environ | settings | connections(cfg, port, smtp)
    _airflow(["db", "migrate"], env, home / "logs" / "setup.log")
    _airflow(["pools", "set", cfg.airflow.gpu_pool, "1", "GPU workers (tagging, training)"], env,
             home / "logs" / "setup.log")
    pids = {}
    for component in COMPONENTS:
        with (home / "logs" / f"{component}.log").open("ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "airflow", component], env=env, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        pids[component] = process.pid
        if component == "api-server":
            api = process
    write_json(home / PIDS_NAME, pids)
    url = settings["AIRFLOW__API__BASE_URL"]
    try:
        wait_until_answering(f"{url}/api/v2/monitor/health", api, timeout_s=timeout_s,
                             log_path=home / "logs" / "api-server.log")
    except RuntimeError as err:
        down(home)
        raise UserError(f"the Airflow API did not come up: {err}") from None
    return Stack(home, url, pids)


def down(home: Path, *, grace_s: float = 20.0) -> list[str]:
    """Stop the components started by :func:`up` in ``home`` (and their task processes); the names stopped."""
    home = home.resolve()
    pids_path = home / PIDS_NAME
    if not pids_path.exists():
        return []
    pids = json.loads(pids_path.read_text())
    for pid in pids.values():
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids.values()):
        time.sleep(0.2)
    for pid in pids.values():
        _signal_group(pid, signal.SIGKILL)
    pids_path.unlink()
    return sorted(pids)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # each component leads its own session: its workers and task processes go too
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of this process is not alive
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True
