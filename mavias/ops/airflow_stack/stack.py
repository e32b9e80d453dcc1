"""``mavias airflow up`` / ``down``: the nightly DAG under a real Airflow stack on this machine, all on 127.0.0.1.

- ``local`` executor: api-server, dag-processor and scheduler (LocalExecutor, every task in its own process) on a
  SQLite metadata DB in ``AIRFLOW_HOME``: one machine, a few parallel tasks.
- ``celery`` executor: the same three plus PostgreSQL (metadata DB, Celery results) and Redis (broker), started here
  (:mod:`mavias.ops.airflow_stack.services`) unless ``database_url`` / ``broker_url`` name running ones, and two Celery
  workers: one on the default queue, one on the ``gpu`` queue (the DAG's GPU tasks). Each worker names itself in
  the task instances' ``hostname`` (``<queue>-worker@<host>``). Passwords stay in ``AIRFLOW_HOME/secrets`` (0600),
  read by Airflow through ``*_CMD`` settings.

The ``gpu`` pool and the connections (``aws_default`` from the nightly config's endpoint and region and the
credentials of the environment, ``MAVIAS_S3_ACCESS_KEY_ID`` / ``MAVIAS_S3_SECRET_ACCESS_KEY``, never of the config
file; ``smtp_default`` when an SMTP server is given; ``airflow_api`` for the DAG's preflight check) are created from the nightly config. ``up``
is idempotent: on a running stack it restarts only the components that died (a killed worker) and keeps the rest;
when it fails, it stops what it started. ``down`` stops exactly what ``up`` started, with the processes they started,
and never a process that has since been given a recorded pid (after a reboot). Airflow runs in subprocesses only:
this module never imports it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mavias.errors import UserError
from mavias.ops.airflow_stack.exclusive import one_at_a_time
from mavias.ops.airflow_stack.services import (
    WORKER_NAME_ENV,
    Recorded,
    check_broker,
    check_database,
    find_process,
    group_members,
    pid_of,
    protect_secrets,
    record_process,
    require_free_port,
    start_postgres,
    start_redis,
    stop_processes,
    write_secret,
)
from mavias.ops.nightly.config import NightlyConfig, config_path, load_nightly_config
from mavias.utils.atomic import write_json
from mavias.utils.servers import ProcessExited, free_port, wait_for, wait_until_answering

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
DAGS_FOLDER, PLUGINS_FOLDER = REPO_ROOT / "dags", REPO_ROOT / "plugins"
STATE_NAME = "mavias-stack.json"
ENV_NAME = "stack.env"  # the settings (secrets only by reference), for `airflow` commands against this stack
API_CONN_ID = "airflow_api"
DEFAULT_QUEUE = "default"  # Airflow's [operators] default_queue
WORKER_CONCURRENCY = {DEFAULT_QUEUE: 2, "gpu": 1}
STOP_GRACE_S = 20.0
Executor = Literal["local", "celery"]


@dataclass(frozen=True)
class Stack:
    home: Path
    url: str
    pids: dict[str, int]
    started: list[str]  # the components this call started (all of them, or those that had died)


def python_path() -> str:
    """PYTHONPATH that makes ``mavias`` importable in Airflow's processes, installed or from this checkout."""
    return os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)


def stack_settings(home: Path, config: Path, port: int, *, executor: Executor = "local", parallelism: int = 4,
                   heartbeat_timeout_s: int = 120) -> dict[str, str]:
    """Airflow settings of the stack (secrets only as ``*_CMD`` reading ``home/secrets``)."""
    url = f"http://127.0.0.1:{port}"
    settings = {
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
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(heartbeat_timeout_s),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "MAVIAS_NIGHTLY_CONFIG": str(config),
        "PYTHONPATH": python_path(),
        "TQDM_DISABLE": "1",
    }
    if executor == "celery":
        del settings["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        secret = {name: f"cat {shlex.quote(str(home / 'secrets' / name))}"
                  for name in ("database-url", "broker-url", "result-backend")}
        settings |= {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "mavias.ops.airflow_stack.services.worker_hostname",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": secret["database-url"],
            "AIRFLOW__CELERY__BROKER_URL_CMD": secret["broker-url"],
            "AIRFLOW__CELERY__RESULT_BACKEND_CMD": secret["result-backend"],
            # longer than the longest task (gpu_task_timeout_min), so that no running task is delivered twice
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "86400",
        }
    return settings


def connections(cfg: NightlyConfig, port: int, smtp: tuple[str, int] | None) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` variables of the stack's connections, built from the nightly config (whose credentials can
    only come from the environment: :func:`~mavias.ops.nightly.config.load_nightly_config` refuses a file holding them).
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


def components(executor: Executor, gpu_queue: str) -> dict[str, list[str]]:
    """Component name -> its ``airflow`` arguments."""
    # --skip-serve-logs: Airflow's log server binds every interface on a fixed port; the api-server reads the
    # task logs from the stack's own log folder
    found = {"api-server": ["api-server"], "dag-processor": ["dag-processor"],
             "scheduler": ["scheduler", "--skip-serve-logs"]}
    if executor == "celery":
        for queue in (DEFAULT_QUEUE, gpu_queue):
            found[f"worker-{queue}"] = ["celery", "worker", "--queues", queue, "--celery-hostname", f"{queue}@%h",
                                        "--concurrency", str(WORKER_CONCURRENCY.get(queue, 1)), "--skip-serve-logs"]
    return found


def _airflow(args: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        done = subprocess.run([sys.executable, "-m", "airflow", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise UserError(f"`airflow {' '.join(args)}` failed (exit {done.returncode}); see {log}")


def read_state(home: Path) -> dict | None:
    path = home / STATE_NAME
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except ValueError:  # not JSON, or not UTF-8 text
        state = None
    if not isinstance(state, dict) or not {"components", "services"} <= state.keys():
        raise UserError(f"{path} is not a record of `mavias airflow up` (damaged, or of another version)",
                        hint="stop what it started by hand (its processes run under --home), then delete it")
    return state


@one_at_a_time(makes_home=True)
def up(home: Path, config: Path | None = None, *, port: int = 8080, smtp: tuple[str, int] | None = None,
       executor: Executor = "local", db_port: int | None = None, broker_port: int | None = None,
       database_url: str | None = None, broker_url: str | None = None, heartbeat_timeout_s: int = 120,
       database_wait_s: float = 90.0, timeout_s: float = 300.0) -> Stack:
    """Start the stack in the background and return once the API answers (and every worker is connected).
    On a stack already running in ``home`` with the same executor and port, start only what has died. A given
    ``database_url`` may still be starting: it is waited for ``database_wait_s``. When it fails, what this call
    started is stopped again."""
    home = home.resolve()
    config = config_path(config).resolve()
    cfg = load_nightly_config(config)
    _prepare_home(home)
    state = read_state(home)
    new = state is None
    if state is None:
        require_free_port(port, "Airflow api-server", "--port")
        state = {"executor": executor, "port": port, "services": {}, "components": {}}
    elif (state["executor"], state["port"]) != (executor, port):
        raise UserError(f"a stack ({state['executor']} executor, port {state['port']}) already runs in {home}: stop "
                        f"it with `mavias airflow down --home {home}` first")
    recorded_before = dict(state["components"])
    try:
        if new:
            write_json(home / STATE_NAME, state)  # before anything starts, so that `down` finds all that did
            if executor == "celery":
                _start_services(home, state, db_port, broker_port, database_url, broker_url, database_wait_s)
        else:
            _require_services_alive(home, state)
        settings = stack_settings(home, config, port, executor=executor, heartbeat_timeout_s=heartbeat_timeout_s)
        (home / ENV_NAME).write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in settings.items()))
        started = _start_components(home, state, os.environ | settings | connections(cfg, port, smtp), cfg,
                                    timeout_s)
    except BaseException:
        _undo(home, state, new, recorded_before)
        raise
    pids = {name: pid_of(entry) for name, entry in state["components"].items()}
    return Stack(home, settings["AIRFLOW__API__BASE_URL"], pids, started)


def _prepare_home(home: Path) -> None:
    (home / "logs").mkdir(parents=True, exist_ok=True)
    if loose := protect_secrets(home):
        log.warning("%s were open to group or others: now to their owner only (files 0600, folders 0700)",
                    ", ".join(map(str, loose)))


def _undo(home: Path, state: dict, new: bool, recorded_before: dict) -> None:
    """Stop what a failed :func:`up` started: the whole stack when it was new, else the components it restarted."""
    if new:
        _stop_stack(home)
        return
    written = _written(home)
    restarted = [find_process(name, entry, written) for name, entry in state["components"].items()
                 if recorded_before.get(name) != entry]
    stop_processes([found.process for found in restarted if found.process], signal.SIGTERM, STOP_GRACE_S)


def _start_services(home: Path, state: dict, db_port: int | None, broker_port: int | None, database_url: str | None,
                    broker_url: str | None, wait_s: float) -> None:
    """Check the given database and broker, start the others (each recorded in the state as soon as it runs); write
    their URLs to ``home/secrets``."""
    if database_url is not None:
        database_url = re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+psycopg2://", database_url)
        check_database(database_url, timeout_s=wait_s)
    if broker_url is not None:
        check_broker(broker_url)
    logs = home / "logs"
    if database_url is None:
        database_url = start_postgres(home, db_port or free_port(), logs / "postgres.log",
                                      on_start=_recorder(home, state, "postgres")).url
    if broker_url is None:
        broker_url = start_redis(home, broker_port or free_port(), logs / "redis.log",
                                 on_start=_recorder(home, state, "redis")).url
    for name, value in {"database-url": database_url, "broker-url": broker_url,
                        "result-backend": f"db+{database_url}"}.items():
        write_secret(home / "secrets" / name, value)


def _recorder(home: Path, state: dict, name: str) -> Callable[[int, Path, bool], None]:
    """Records the service ``name`` in the state file as soon as it runs: a stack killed while it starts up still
    has it stopped by `down`."""
    def record(pid: int, data_dir: Path, temporary: bool) -> None:
        state["services"][name] = record_process(pid) | {"data_dir": str(data_dir), "temporary": temporary}
        write_json(home / STATE_NAME, state)

    return record


def _require_services_alive(home: Path, state: dict) -> None:
    written = _written(home)
    for name, service in state["services"].items():
        if find_process(name, service, written).process is None:
            raise UserError(f"the stack's {name} in {home} has stopped (see {home / 'logs' / name}.log): "
                            f"`mavias airflow down --home {home}`, then up again")
    if state["executor"] == "celery":
        broker = home / "secrets" / "broker-url"
        if not broker.is_file():  # an `up` killed before its services answered
            raise UserError(f"the stack in {home} never finished starting (no broker was recorded): "
                            f"`mavias airflow down --home {home}`, then up again")
        check_broker(broker.read_text(), option="the broker of `mavias airflow up`")


def _start_components(home: Path, state: dict, env: dict[str, str], cfg: NightlyConfig,
                      timeout_s: float) -> list[str]:
    wanted = components(state["executor"], cfg.airflow.gpu_queue)
    recorded, written = state["components"], _written(home)
    dead = [name for name in wanted
            if name not in recorded or find_process(name, recorded[name], written).process is None]
    if "api-server" in dead and "api-server" in recorded:
        require_free_port(state["port"], "Airflow api-server", "--port")
    if len(dead) == len(wanted):  # a new stack: the schema and the pool first
        _airflow(["db", "migrate"], env, home / "logs" / "setup.log")
        _airflow(["pools", "set", cfg.airflow.gpu_pool, "1", "GPU workers (tagging, training)"], env,
                 home / "logs" / "setup.log")
    processes = {}
    for name in dead:
        log = home / "logs" / f"{name}.log"
        offset = log.stat().st_size if log.exists() else 0
        own = {WORKER_NAME_ENV: f"{name.removeprefix('worker-')}-worker@{socket.gethostname()}"}
        with log.open("ab") as out:
            processes[name] = (subprocess.Popen([sys.executable, "-m", "airflow", *wanted[name]],
                                                env=env | (own if name.startswith("worker-") else {}), stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True), log, offset)
        recorded[name] = record_process(processes[name][0].pid)
        write_json(home / STATE_NAME, state)
    for name, (process, log, offset) in processes.items():
        _wait_ready(name, process, log, offset, state, timeout_s)
    return dead


def _wait_ready(name: str, process: subprocess.Popen, log: Path, offset: int, state: dict, timeout_s: float) -> None:
    if name == "api-server":
        try:
            wait_until_answering(f"http://127.0.0.1:{state['port']}/api/v2/monitor/health", process,
                                 timeout_s=timeout_s, log_path=log)
        except RuntimeError as err:
            raise UserError(f"the Airflow api-server did not come up ({str(err).splitlines()[0]}); see {log}") from None
    elif name.startswith("worker-"):
        try:
            wait_for(lambda: _worker_connected(log, offset), process, timeout_s=timeout_s, interval_s=0.5,
                     retry_on=WorkerNotConnected)
        except (ProcessExited, WorkerNotConnected):
            raise UserError(f"the Celery worker of queue '{name.removeprefix('worker-')}' did not connect to the "
                            f"broker (see {log}): check that Redis answers, then `mavias airflow up` again") from None


class WorkerNotConnected(Exception):
    """A Celery worker's log does not say it is ready yet."""


def _worker_connected(log: Path, offset: int) -> None:
    if not re.search(rb"@\S+ ready\.", log.read_bytes()[offset:]):
        raise WorkerNotConnected(str(log))


@one_at_a_time(makes_home=False)
def down(home: Path, *, grace_s: float = STOP_GRACE_S) -> list[str]:
    """Stop what :func:`up` started in ``home`` (components with the processes they started, then the services) and
    forget it; a recorded pid that now belongs to another process is left alone, with a warning. The names stopped
    (or found stopped already)."""
    return _stop_stack(home, grace_s=grace_s)


def _stop_stack(home: Path, *, grace_s: float = STOP_GRACE_S) -> list[str]:
    """:func:`down` without the home's lock (an `up` that failed holds it already)."""
    home = home.resolve()
    state = read_state(home)
    if state is None:
        return []
    written = _written(home)
    found = {name: find_process(name, entry, written)
             for name, entry in [*state["components"].items(), *state["services"].items()]}
    for name, recorded in found.items():
        if recorded.doubt:
            log.warning("%s of the stack in %s: pid %d not signalled, %s; check it with `ps -o pid,lstart,args -p %d` "
                        "and stop it yourself if it is the stack's", name, home, recorded.pid, recorded.doubt,
                        recorded.pid)
    components = [found[name] for name in state["components"]]
    stop_processes([c.process for c in components if c.process]
                   + group_members({c.pid for c in components if not c.doubt}), signal.SIGTERM, grace_s)
    for name, service in state["services"].items():
        _stop_service(name, service, found[name], grace_s)
    (home / STATE_NAME).unlink()
    return sorted(name for name, recorded in found.items() if not recorded.doubt)


def _stop_service(name: str, service: dict, recorded: Recorded, grace_s: float) -> None:
    if recorded.doubt:  # it may still be the service, on its data
        return
    if recorded.process is not None:  # PostgreSQL's fast shutdown is SIGINT (SIGTERM waits for clients)
        stop_processes([recorded.process], signal.SIGINT if name == "postgres" else signal.SIGTERM, grace_s)
    if service["temporary"]:
        shutil.rmtree(service["data_dir"], ignore_errors=True)


def _written(home: Path) -> float:
    return (home / STATE_NAME).stat().st_mtime
