"""What made a task of a night fail, in one line, kept in the workspace for the report.

Airflow keeps a failed task's traceback in its log, which the report cannot read; so each stage's error is written
here when it escapes (``nights/<night>/failures/<task>.json``, the last try's), and the report quotes the line of
every task that ended failed. A user mistake (a :class:`~mavias.errors.UserError`: a configuration error, an unsafe
name, a missing evaluation set) is marked so: retrying cannot fix it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from mavias.errors import ExplainedFailure, as_user_error
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import REPORTS_DIR, layout
from mavias.storage.names import check_name
from mavias.utils.atomic import write_json

FAILURES_DIR = "failures"
STARTED_NAME = "started.json"


class TaskFailure(TypedDict):
    task: str
    message: str  # one line
    user_error: bool  # a mistake to fix (configuration, data); not retried
    at: str


def one_line(error: BaseException) -> str:
    """The error as one line: a user mistake's or an explained failure's own message, else its type and message."""
    mistake = as_user_error(error)
    if mistake is not None or isinstance(error, ExplainedFailure):
        text = str(mistake or error)
    else:
        first = str(error).strip().splitlines()
        text = f"{type(error).__name__}: {first[0]}" if first else type(error).__name__
    return " ".join(text.split())


def record_failure(cfg: NightlyConfig, night: str, task: str, error: BaseException | str) -> Path:
    """Keep the line of ``task``'s error (or a message) for the night's report; the last try's wins."""
    failure: TaskFailure = {
        "task": task, "message": error if isinstance(error, str) else one_line(error),
        "user_error": not isinstance(error, str) and as_user_error(error) is not None,
        "at": datetime.now(UTC).isoformat(),
    }
    return write_json(_folder(cfg, night) / f"{check_name('task', task)}.json", failure)


def read_failures(cfg: NightlyConfig, night: str, tasks: Iterable[str]) -> dict[str, TaskFailure]:
    """The recorded failures of ``tasks`` (those that ended failed), in the order given."""
    found = {}
    for task in tasks:
        path = _folder(cfg, night) / f"{check_name('task', task)}.json"
        if path.is_file():
            found[task] = json.loads(path.read_text())
    return found


def record_start(cfg: NightlyConfig, night: str) -> None:
    """Mark the night started (``sense``): a later report names it if it never reported (:func:`unreported_nights`)."""
    write_json(layout(cfg).night(night) / STARTED_NAME, {"night": night, "at": datetime.now(UTC).isoformat()})


def unreported_nights(cfg: NightlyConfig, night: str) -> list[str]:
    """The nights before ``night``, since the last one that reported, that started but wrote no report: their run
    was stopped before its report task (its ``dagrun_timeout`` skips every unfinished task, the report's too)."""
    folders = layout(cfg).nights  # names are read, not checked: a volume's own folders (.snapshot) sit there too
    earlier = sorted(path.name for path in folders.glob("*") if path.is_dir() and path.name < night)
    reported = [name for name in earlier if (folders / name / REPORTS_DIR).is_dir()]
    since = reported[-1] if reported else ""
    return [name for name in earlier if name > since and (folders / name / STARTED_NAME).is_file()]


def _folder(cfg: NightlyConfig, night: str) -> Path:
    return layout(cfg).night(night) / FAILURES_DIR
