"""Waiting for a local server: an exited process ends the wait at once, a timeout names the last failure."""

import subprocess
import sys
import time

import pytest

from mavias.utils.servers import ProcessExited, wait_for, wait_until_answering


def _refused() -> None:
    raise ConnectionRefusedError("nothing listens")


def test_a_process_that_exits_ends_the_wait_with_its_exit_code():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    with pytest.raises(ProcessExited) as exited:
        wait_for(_refused, process, timeout_s=30, interval_s=0.05)
    assert exited.value.code == 3 and time.monotonic() - started < 15


def test_the_wait_ends_with_the_last_failure_after_its_timeout():
    with pytest.raises(ConnectionRefusedError, match="nothing listens"):
        wait_for(_refused, None, timeout_s=0.3, interval_s=0.05)


def test_a_failure_that_is_not_waited_out_is_raised_at_once():
    calls = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("a bad address")

    with pytest.raises(ValueError, match="a bad address"):
        wait_for(broken, None, timeout_s=30, interval_s=0.05, retry_on=OSError)
    assert len(calls) == 1


def test_the_wait_returns_once_the_check_passes():
    calls = []

    def third_time_lucky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("not yet")

    wait_for(third_time_lucky, None, timeout_s=30, interval_s=0.01)
    assert len(calls) == 3


def test_a_server_that_died_is_named_with_the_tail_of_its_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("address already in use\n")
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    with pytest.raises(RuntimeError, match="exited with code 1\naddress already in use"):
        wait_until_answering("http://127.0.0.1:9/", process, timeout_s=30, log_path=log)
