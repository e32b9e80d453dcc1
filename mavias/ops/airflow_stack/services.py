"""The services under a CeleryExecutor stack, on 127.0.0.1: PostgreSQL (Airflow's metadata database and Celery's
results) and Redis (the Celery broker), each with its own data folder and a generated password; and the checks
that name the component at fault and the fix: a port in use, a database or broker that does not answer. A service
that does not answer as it starts is stopped again; the secret files stay readable by their owner only.

The processes of a stack (services and Airflow's components) are recorded with their start time and found again by
it, so that a later process given the same pid (after a reboot) is never signalled in their place.

PostgreSQL refuses to run as root: started by root, it runs as the ``postgres`` system account (Debian's package
creates it) with its data in a temporary folder, removed when the stack stops. Started by another user, it runs as
that user with its data in ``AIRFLOW_HOME/postgres``, kept between stacks.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from mavias.errors import UserError
from mavias.utils.servers import ProcessExited, bind_problem, stop_process, wait_for

if TYPE_CHECKING:
    import psutil

PG_ACCOUNT = "postgres"
DB_NAME = DB_USER = "airflow"
READY_TIMEOUT_S = 90.0
WORKER_NAME_ENV = "MAVIAS_WORKER_NAME"
INSTALL_HINT = "run `make system-deps` (Debian/Ubuntu: apt-get install postgresql redis-server)"
STOP_TIMEOUT_S = 20.0
# besides home/secrets: Airflow's fernet key, JWT and API secrets, the simple auth manager's generated passwords,
# and the Redis configuration with its password
SECRET_FILES = ("airflow.cfg", "simple_auth_manager_passwords.json.generated", "redis/redis.conf")
# /proc/stat gives the boot time, part of every start time, in whole seconds: it may tick over between two readings
START_TIME_TOLERANCE_S = 1.0
# what the command line of a process of the stack holds: the components run `python -m airflow ...` (a Celery worker
# retitles itself `[celeryd: ...] (celery worker ...)`)
COMMAND_WORDS = {"postgres": ("postgres",), "redis": ("redis-server",)}
COMPONENT_WORDS = ("airflow", "celery")


Started = Callable[[int, Path, bool], None] | None  # (pid, data folder, temporary) of a service just started


@dataclass(frozen=True)
class Service:
    pid: int
    url: str  # with its password: kept in AIRFLOW_HOME/secrets only
    data_dir: Path
    temporary: bool = False  # removed when the stack stops


def worker_hostname() -> str:
    """Airflow's ``hostname_callable``: the Celery worker's name where set, so that the task instances say which of
    the workers on this machine ran them."""
    return os.environ.get(WORKER_NAME_ENV) or socket.getfqdn()


def require_free_port(port: int, component: str, option: str) -> None:
    if bind_problem("127.0.0.1", port) is not None:
        raise UserError(f"port {port} on 127.0.0.1 is in use and the {component} needs it: stop what listens "
                        f"there, or pass {option} with a free port")


def _wait(check: Callable[[], None], process: subprocess.Popen | None, what: str, fix: str,
          timeout_s: float, secret: str | None = None) -> None:
    try:
        wait_for(check, process, timeout_s=timeout_s, interval_s=0.5)
    except ProcessExited as exited:
        raise UserError(f"the {what} exited with code {exited.code} as it started: {fix}") from None
    except Exception as err:  # noqa: BLE001 - any failure to answer means "not up yet"; this is the last one
        failure = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if secret:  # a driver's message may quote the whole URL, password included
            failure = failure.replace(secret, "***")
        raise UserError(f"the {what} did not answer within {timeout_s:.0f} s ({failure}): {fix}") from None


def _host_port(url: str, option: str) -> str:
    """``host[:port]`` of a service URL, or one line saying the option's URL is not one."""
    parts = urlsplit(url.removeprefix("db+"))
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1:
        raise UserError(f"{option} is no URL with a host (and a port, if any) (e.g. redis://:PASSWORD@127.0.0.1:6379/0 "
                        "or postgresql://USER:PASSWORD@127.0.0.1:5432/airflow)")
    return parts.hostname + ("" if port is None else f":{port}")


def _password(url: str) -> str | None:
    return urlsplit(url.removeprefix("db+")).password


def _connect_database(url: str) -> None:
    import psycopg2

    psycopg2.connect(re.sub(r"^postgresql\+psycopg2", "postgresql", url), connect_timeout=3).close()


def _ping_broker(url: str) -> None:
    import redis

    redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).ping()


def check_database(url: str, *, timeout_s: float = READY_TIMEOUT_S, option: str = "--database-url") -> None:
    """Wait for the metadata database (it may be starting); fail with what to do."""
    _wait(lambda: _connect_database(url), None, f"metadata database (PostgreSQL at {_host_port(url, option)})",
          f"start it, or fix {option}", timeout_s, secret=_password(url))


def check_broker(url: str, *, timeout_s: float = 10.0, option: str = "--broker-url") -> None:
    """The Celery broker answers; else no worker can take a task: fail with what to do."""
    _wait(lambda: _ping_broker(url), None, f"Celery broker (Redis at {_host_port(url, option)})",
          f"start Redis there, or fix {option}", timeout_s, secret=_password(url))


def _binary(name: str, candidates: list[Path]) -> str:
    found = [str(p) for p in candidates if p.is_file()] or [shutil.which(name) or ""]
    if not found[-1]:
        raise UserError(f"`{name}` is not installed (the CeleryExecutor stack needs it): {INSTALL_HINT}")
    return found[-1]


def _postgres_binary(name: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return _binary(name, [folder / name for folder in versions])


def start_postgres(home: Path, port: int, log: Path, on_start: Started = None) -> Service:
    """Start PostgreSQL on 127.0.0.1:``port`` (initialised on first use) and create the ``airflow`` database;
    ``on_start`` hears of the process as soon as it runs (to record it before the wait for it to answer)."""
    require_free_port(port, "metadata database (PostgreSQL)", "--db-port")
    binaries = {name: _postgres_binary(name) for name in ("initdb", "postgres")}  # named before anything is made
    as_root = os.geteuid() == 0
    if as_root:
        _require_account(PG_ACCOUNT)
    account = {"user": PG_ACCOUNT, "group": PG_ACCOUNT, "extra_groups": []} if as_root else {}
    data = Path(tempfile.mkdtemp(prefix="mavias-postgres-")) if as_root else home / "postgres"
    try:
        data.mkdir(mode=0o700, exist_ok=True)
        if as_root:
            shutil.chown(data, PG_ACCOUNT, PG_ACCOUNT)
        secret = home / "secrets" / "postgres-password"
        if not (data / "pgdata" / "PG_VERSION").exists():
            _initdb(binaries["initdb"], data, secret, log, account)
        with log.open("ab") as out:
            process = subprocess.Popen(
                [binaries["postgres"], "-D", str(data / "pgdata"), "-c", "listen_addresses=127.0.0.1",
                 "-c", f"port={port}", "-c", "unix_socket_directories="],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **account)
        if on_start is not None:
            on_start(process.pid, data, as_root)
    except BaseException:
        if as_root:  # a temporary folder of root's: nobody else would remove it
            shutil.rmtree(data, ignore_errors=True)
        raise
    server = f"postgresql+psycopg2://{DB_USER}:{secret.read_text()}@127.0.0.1:{port}"
    with _stopped_on_failure(process):
        _wait(lambda: _connect_database(f"{server}/postgres"), process, "metadata database (PostgreSQL)",
              f"see {log}", READY_TIMEOUT_S)
        _create_database(f"{server}/postgres")
    return Service(process.pid, f"{server}/{DB_NAME}", data, temporary=as_root)


def _require_account(name: str) -> None:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        raise UserError(f"PostgreSQL refuses to run as root, and there is no {name!r} account to run it as",
                        hint=f"create one (useradd --system {name}), run `mavias airflow up` as another user, or "
                             "pass --database-url of a running PostgreSQL") from None


def _initdb(initdb: str, data: Path, secret: Path, log: Path, account: dict) -> None:
    """A new cluster in ``data/pgdata`` whose superuser's password is ``secret`` (the copy initdb reads is removed
    whatever happens)."""
    write_secret(secret, secrets.token_urlsafe(24))
    password_file = data / "password"
    write_secret(password_file, secret.read_text())
    try:
        if account:
            shutil.chown(password_file, PG_ACCOUNT, PG_ACCOUNT)
        with log.open("ab") as out:
            done = subprocess.run([initdb, "-D", str(data / "pgdata"), "-U", DB_USER, "-A", "scram-sha-256",
                                   f"--pwfile={password_file}"], stdout=out, stderr=subprocess.STDOUT, **account)
    finally:
        password_file.unlink(missing_ok=True)
    if done.returncode != 0:
        raise UserError(f"initdb failed (exit {done.returncode}); see {log}",
                        hint="fix what it says (often the locale: set LANG=C.UTF-8), then run this again")


def _create_database(url: str) -> None:
    import psycopg2

    connection = psycopg2.connect(url.replace("postgresql+psycopg2", "postgresql"))
    connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,))
            if cursor.fetchone() is None:
                cursor.execute(f"CREATE DATABASE {DB_NAME}")
    finally:
        connection.close()


def _redis_quoted(path: Path) -> str:
    """A path as one argument of a redis.conf line (the file splits lines on spaces)."""
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def start_redis(home: Path, port: int, log: Path, on_start: Started = None) -> Service:
    """Start Redis on 127.0.0.1:``port`` with a password and an append-only file in ``home/redis``."""
    require_free_port(port, "Celery broker (Redis)", "--broker-port")
    data = home / "redis"
    data.mkdir(mode=0o700, exist_ok=True)
    password = secrets.token_urlsafe(24)
    config = data / "redis.conf"
    write_secret(config, f"bind 127.0.0.1\nport {port}\nprotected-mode yes\nrequirepass {password}\n"
                         f"dir {_redis_quoted(data)}\n"
                         "appendonly yes\nsave \"\"\n")
    with log.open("ab") as out:
        process = subprocess.Popen([_binary("redis-server", []), str(config)], stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    if on_start is not None:
        on_start(process.pid, data, False)
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    with _stopped_on_failure(process):
        _wait(lambda: _ping_broker(url), process, "Celery broker (Redis)", f"see {log}", READY_TIMEOUT_S)
    return Service(process.pid, url, data)


@contextmanager
def _stopped_on_failure(process: subprocess.Popen) -> Iterator[None]:
    """Stop the service ``process`` when what follows its start fails: not yet recorded, no one else would."""
    try:
        yield
    except BaseException:
        stop_process(process, grace_s=STOP_TIMEOUT_S)
        raise


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, created readable by its owner only (:func:`protect_secrets` sees to old files)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)


def protect_secrets(home: Path) -> list[Path]:
    """Create ``home/secrets`` (0700); make it and the stack's secret files in ``home`` private again where group or
    others may read them (copied, restored from a backup, written under a loose umask). The paths changed."""
    folder = home / "secrets"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = [path for path in [*folder.iterdir(), *(home / name for name in SECRET_FILES)] if path.is_file()]
    return [path for path, mode in [(folder, 0o700), *((path, 0o600) for path in files)] if _made_private(path, mode)]


def _made_private(path: Path, mode: int) -> bool:
    if path.stat().st_mode & 0o077 == 0:
        return False
    path.chmod(mode)
    return True


def pid_of(entry: int | dict) -> int:
    return entry if isinstance(entry, int) else entry["pid"]


def record_process(pid: int) -> dict:
    """A process just started, as the stack's state keeps it: its pid and its start time, which tell it from a later
    process given the same pid (after it exited, or after a reboot)."""
    import psutil

    return {"pid": pid, "started_at": psutil.Process(pid).create_time()}


@dataclass(frozen=True)
class Recorded:
    """What now holds a pid of the stack's state."""

    pid: int
    process: psutil.Process | None  # the process that `up` started, while it runs
    doubt: str = ""  # why the live process holding the pid is not taken for it (then it is left alone)


def find_process(name: str, entry: int | dict, written: float) -> Recorded:
    """The process recorded as ``name`` (a bare pid in state files of older versions) in the stack's state, last
    written at ``written``."""
    import psutil

    pid = pid_of(entry)
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return Recorded(pid, None)
        doubt = _doubt(name, entry, process, written)
    except psutil.NoSuchProcess:
        return Recorded(pid, None)
    except psutil.AccessDenied:
        doubt = "this user may not inspect the process that has it now"
    return Recorded(pid, None, doubt) if doubt else Recorded(pid, process)


def _doubt(name: str, entry: int | dict, process: psutil.Process, written: float) -> str:
    """Why the live ``process`` holding the pid recorded for ``name`` is not taken for it; "" when it is."""
    started = process.create_time()
    if isinstance(entry, dict) and "started_at" in entry:
        if abs(started - entry["started_at"]) <= START_TIME_TOLERANCE_S:
            return ""
        return f"it now belongs to a process started at {_clock(started)}, not at {_clock(entry['started_at'])}"
    # no start time recorded (a state file of an older version): a process older than the file, with the command
    command = " ".join(process.cmdline())
    words = COMMAND_WORDS.get(name, COMPONENT_WORDS)
    if started <= written + START_TIME_TOLERANCE_S and any(word in command for word in words):
        return ""
    return (f"the state file (of an older version) has no start time to check it by, and `{command}`, started at "
            f"{_clock(started)}, does not look like the {name} that `up` started")


def _clock(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def stop_processes(processes: list[psutil.Process], sig: signal.Signals, grace_s: float) -> None:
    """Signal each process and every process it started (also those in sessions of their own, such as the ranks of
    a distributed training), then kill what is left after ``grace_s``."""
    import psutil

    tree = []
    for process in processes:
        try:
            tree += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for process in tree:
        _signal(process, sig)
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for process in alive:
        _signal(process, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)


def group_members(leaders: set[int]) -> list[psutil.Process]:
    """The live processes in the process groups of ``leaders`` (each component starts a session of its own): also
    those a dead component left behind, re-parented to init. A dead leader's pid is not given to a new process while
    its group still has members, so the group is still the component's."""
    import psutil

    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) in leaders:
                members.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def _signal(process: psutil.Process, sig: signal.Signals) -> None:
    import psutil

    try:
        process.send_signal(sig)
    except psutil.NoSuchProcess:
        pass
