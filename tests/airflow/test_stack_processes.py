"""What `mavias airflow up` / `down` do with the processes and files of a stack, with real processes and no Airflow
scheduler: a recorded pid is signalled only while it still is the process `up` started (a `sleep` stands in for a
component), also with the state files of older versions that hold bare pids; secret files readable by others are
made private again; a failed `up` stops the PostgreSQL or Redis it started (the `slow` tests start them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg2
import pytest
from typer.testing import CliRunner

from mavias.cli import app
from mavias.errors import UserError
from mavias.ops.airflow_stack import stack as local_airflow
from mavias.ops.airflow_stack.services import record_process, start_postgres, stop_processes
from mavias.utils.servers import free_port

Spawn = Callable[..., subprocess.Popen]
AN_HOUR_S = 3600


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start a real process (``sleep 60`` unless told otherwise); killed at the end of the test."""
    started: list[subprocess.Popen] = []

    def start(*command: str) -> subprocess.Popen:
        started.append(subprocess.Popen(list(command) or ["sleep", "60"]))
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.wait()


def _write_state(home: Path, components: dict, services: dict | None = None, executor: str = "local") -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / local_airflow.STATE_NAME
    path.write_text(json.dumps({"executor": executor, "port": free_port(), "components": components,
                                "services": services or {}}))
    return path


def _down(home: Path) -> str:
    result = CliRunner().invoke(app, ["airflow", "down", "--home", str(home)])
    assert result.exit_code == 0, result.output
    return result.output


def _recorded_an_hour_earlier(pid: int) -> dict:
    """The record of a process that ran with ``pid`` an hour ago: ``pid`` now belongs to another one."""
    record = record_process(pid)
    return record | {"started_at": record["started_at"] - AN_HOUR_S}


def _ended(process: subprocess.Popen) -> bool:
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return True


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("warning:")]


def test_down_stops_a_recorded_process_that_still_is_the_one_started(tmp_path: Path, spawn: Spawn) -> None:
    scheduler = spawn()
    state = _write_state(tmp_path, {"scheduler": record_process(scheduler.pid)})
    output = _down(tmp_path)
    assert _ended(scheduler) and "stopped: scheduler" in output and not _warnings(output)
    assert not state.exists()


def test_down_leaves_alone_a_pid_that_now_belongs_to_another_process(tmp_path: Path, spawn: Spawn) -> None:
    other = spawn()
    state = _write_state(tmp_path, {"scheduler": _recorded_an_hour_earlier(other.pid)})
    output = _down(tmp_path)
    assert other.poll() is None  # still running, never signalled
    [warning] = _warnings(output)
    assert (f"scheduler of the stack in {tmp_path}: pid {other.pid} not signalled, it now belongs to a process "
            "started at") in warning
    assert f"check it with `ps -o pid,lstart,args -p {other.pid}`" in warning
    assert not state.exists()  # the stale state is gone: the next `up` starts afresh


def test_an_old_state_without_start_times_is_judged_by_the_command_line(tmp_path: Path, spawn: Spawn) -> None:
    scheduler = spawn(sys.executable, "-c", "import time; time.sleep(60)", "airflow", "scheduler")
    other = spawn()
    _write_state(tmp_path, {"scheduler": scheduler.pid, "dag-processor": other.pid})
    output = _down(tmp_path)
    assert _ended(scheduler) and other.poll() is None
    assert "stopped: scheduler" in output
    [warning] = _warnings(output)
    assert f"dag-processor of the stack in {tmp_path}: pid {other.pid} not signalled" in warning
    assert "has no start time to check it by, and `sleep 60`" in warning


def test_an_old_state_does_not_take_a_process_started_after_it_for_its_own(tmp_path: Path, spawn: Spawn) -> None:
    later = spawn(sys.executable, "-c", "import time; time.sleep(60)", "airflow", "scheduler")
    state = _write_state(tmp_path, {"scheduler": later.pid})
    an_hour_ago = time.time() - AN_HOUR_S
    os.utime(state, (an_hour_ago, an_hour_ago))
    output = _down(tmp_path)
    assert later.poll() is None and len(_warnings(output)) == 1


def test_up_takes_a_service_whose_pid_now_belongs_to_another_process_for_stopped(tmp_path: Path,
                                                                               spawn: Spawn) -> None:
    other = spawn()
    redis = _recorded_an_hour_earlier(other.pid) | {"data_dir": str(tmp_path / "redis"), "temporary": False}
    state = json.loads(_write_state(tmp_path, {}, {"redis": redis}, executor="celery").read_text())
    with pytest.raises(UserError, match=r"the stack's redis in .* has stopped .*`mavias airflow down --home"):
        local_airflow.up(tmp_path, port=state["port"], executor="celery")
    assert other.poll() is None


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_up_makes_secret_files_readable_by_others_private_again(tmp_path: Path) -> None:
    loose = {tmp_path / "secrets" / "postgres-password": 0o644, tmp_path / "secrets" / "database-url": 0o640,
             tmp_path / "airflow.cfg": 0o644, tmp_path / "redis" / "redis.conf": 0o604}
    for path, mode in loose.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text("a secret")
        path.chmod(mode)
    (tmp_path / "secrets").chmod(0o755)
    private = tmp_path / "secrets" / "broker-url"
    private.write_text("a secret")
    private.chmod(0o600)
    with socket.socket() as taken:  # then `up` stops at once, after looking at the secrets
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        command = ["airflow", "up", "--executor", "celery", "--home", str(tmp_path),
                   "--port", str(taken.getsockname()[1])]
        first, second = CliRunner().invoke(app, command), CliRunner().invoke(app, command)
    assert first.exit_code == 2 and "is in use and the Airflow api-server needs it" in first.output
    assert {path: _mode(path) for path in loose} == dict.fromkeys(loose, 0o600)
    assert _mode(tmp_path / "secrets") == 0o700
    [warning] = _warnings(first.output)
    assert "were open to group or others: now to their owner only (files 0600, folders 0700)" in warning
    assert all(str(path) in warning for path in [*loose, tmp_path / "secrets"]) and str(private) not in warning
    assert not _warnings(second.output)  # said once, when it changed them


@pytest.fixture
def database_without_rights(tmp_path: Path) -> Iterator[str]:
    """A running PostgreSQL and the URL of a role that may connect to its `airflow` database but create nothing in
    it, so that Airflow's migration fails."""
    home, port = tmp_path / "external-db", free_port()
    home.mkdir()
    service = start_postgres(home, port, home / "postgres.log")
    try:
        connection = psycopg2.connect(service.url.replace("postgresql+psycopg2", "postgresql"))
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE ROLE reader LOGIN PASSWORD 'reader-password'")
        connection.close()
        yield f"postgresql://reader:reader-password@127.0.0.1:{port}/airflow"
    finally:
        stop_processes([psutil.Process(service.pid)], signal.SIGINT, 20)
        if service.temporary:
            shutil.rmtree(service.data_dir)


@pytest.mark.slow
def test_a_failed_up_on_a_fresh_home_stops_the_redis_it_started(tmp_path: Path, database_without_rights: str) -> None:
    home, broker_port = tmp_path / "airflow", free_port()
    result = CliRunner().invoke(app, ["airflow", "up", "--executor", "celery", "--home", str(home),
                                      "--port", str(free_port()), "--broker-port", str(broker_port),
                                      "--database-url", database_without_rights])
    assert result.exit_code == 2 and "Traceback" not in result.output
    setup_log = home / "logs" / "setup.log"
    assert result.output.strip().splitlines() == [f"error: `airflow db migrate` failed (exit 1); see {setup_log}"]
    assert not _answers(broker_port) and not (home / local_airflow.STATE_NAME).exists()
    assert _mode(home / "secrets") == 0o700 and _mode(home / "secrets" / "database-url") == 0o600


@pytest.mark.slow
def test_a_failed_up_stops_the_postgres_it_started(tmp_path: Path) -> None:
    db_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(UserError, match=r"the Celery broker \(Redis\) needs it: .* pass --broker-port"):
            local_airflow.up(tmp_path, port=free_port(), executor="celery", db_port=db_port,
                             broker_port=taken.getsockname()[1])
    assert not _answers(db_port) and not (tmp_path / local_airflow.STATE_NAME).exists()


def test_redis_starts_in_a_home_whose_path_has_a_space(tmp_path: Path) -> None:
    from mavias.ops.airflow_stack.services import start_redis

    home = tmp_path / "my stack"
    home.mkdir()
    service = start_redis(home, free_port(), home / "redis.log")
    try:
        assert psutil.Process(service.pid).is_running()
    finally:
        stop_processes([psutil.Process(service.pid)], signal.SIGTERM, 10)


@pytest.mark.parametrize(("check", "url", "expect"), [
    ("check_broker", "redis://:s3cret@127.0.0.1:abc/0", "--broker-url is no URL with a host"),
    ("check_database", "postgresql://airflow:s3cret@127.0.0.1:1/airflow", "did not answer within 1 s"),
    ("check_database", "postgresql://airflow:s3cret@127.0.0.1:1/airflow?sslmode=nonsense", "did not answer within"),
])
def test_a_service_url_that_is_wrong_is_one_line_without_its_password(check: str, url: str, expect: str) -> None:
    from mavias.ops.airflow_stack import services

    with pytest.raises(UserError, match=expect) as error:
        getattr(services, check)(url, timeout_s=1)
    assert "s3cret" not in str(error.value)


def test_a_second_up_or_down_on_a_home_in_use_is_refused_at_once(tmp_path: Path) -> None:
    """Two at once would each keep only their own processes in the state file; `down` would miss the other's."""
    from filelock import FileLock

    from mavias.ops.airflow_stack.exclusive import LOCK_NAME

    home = tmp_path / "airflow"
    home.mkdir()
    with FileLock(home / LOCK_NAME):  # an `up` still starting, in another terminal
        for action in (lambda: local_airflow.up(home, port=free_port()), lambda: local_airflow.down(home)):
            with pytest.raises(UserError, match="another `mavias airflow up` or `down` is running on"):
                action()
    assert local_airflow.down(home) == []  # free again: nothing recorded, nothing to stop
    assert local_airflow.down(tmp_path / "never made") == [] and not (tmp_path / "never made").exists()


def test_an_initdb_that_fails_is_one_line_and_leaves_no_password_or_folder_behind(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    import tempfile

    from mavias.ops.airflow_stack import services

    before = set(Path(tempfile.gettempdir()).glob("mavias-postgres-*"))
    monkeypatch.setattr(services, "_postgres_binary", lambda name: "/bin/false")  # e.g. a locale initdb refuses
    with pytest.raises(UserError, match="initdb failed \\(exit 1\\); see"):
        services.start_postgres(tmp_path, free_port(), tmp_path / "postgres.log")
    assert not list(tmp_path.rglob("password")) and set(Path(tempfile.gettempdir()).glob("mavias-postgres-*")) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL runs as its own account only when started by root")
def test_root_without_a_postgres_account_is_told_what_to_do(tmp_path: Path, monkeypatch) -> None:
    from mavias.ops.airflow_stack import services

    monkeypatch.setattr(services, "PG_ACCOUNT", "no-such-account")
    with pytest.raises(UserError, match="no 'no-such-account' account to run it as"):
        services.start_postgres(tmp_path, free_port(), tmp_path / "postgres.log")


def test_down_stops_what_a_component_that_died_left_behind(tmp_path: Path) -> None:
    """A scheduler killed (OOM) leaves its task processes to init; `down` reaches them through its process group."""
    scheduler = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! ; wait"], stdout=subprocess.PIPE, text=True,
                                 start_new_session=True)  # as `up` starts every component
    task = psutil.Process(int(scheduler.stdout.readline()))
    _write_state(tmp_path, {"scheduler": record_process(scheduler.pid)})
    scheduler.kill()
    scheduler.wait()
    try:
        _down(tmp_path)
        assert not task.is_running() or task.status() == psutil.STATUS_ZOMBIE
    finally:
        if task.is_running():
            task.kill()


_UP_KILLED_WHILE_POSTGRES_STARTS = """
import os, signal, sys
from pathlib import Path
from mavias.ops.airflow_stack import services, stack
from mavias.utils.servers import free_port
how = signal.SIGKILL if sys.argv[2] == "kill" else signal.SIGTERM

def killed(check, process, *args, **kwargs):  # while PostgreSQL is starting up
    print(process.pid, flush=True)
    os.kill(os.getpid(), how)

services._wait = killed
stack.up(Path(sys.argv[1]), port=free_port(), executor="celery")
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill", "term"])
def test_an_up_killed_while_its_database_starts_leaves_nothing_down_cannot_stop(tmp_path: Path, how: str) -> None:
    """SIGKILL: the PostgreSQL it started is already in the state file, so `down` stops it. SIGTERM (or a closed
    terminal's SIGHUP): `up` cleans up after itself as when interrupted."""
    home = tmp_path / "airflow"
    done = subprocess.run([sys.executable, "-c", _UP_KILLED_WHILE_POSTGRES_STARTS, str(home), how],
                          capture_output=True, text=True, timeout=120,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    postgres = int(done.stdout.split()[0])
    if how == "kill":
        assert local_airflow.read_state(home)["services"]["postgres"]["pid"] == postgres
        assert not _gone(postgres)
        local_airflow.down(home)
    else:
        assert local_airflow.read_state(home) is None
    assert _gone(postgres)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
