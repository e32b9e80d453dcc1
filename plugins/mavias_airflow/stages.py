"""Running a stage of the nightly flow as an Airflow task: its error (or its timeout) is kept for the report, in one
line, and a user mistake (a configuration error, an unsafe name, a missing evaluation set, a broken gates file: any
``UserError``) fails the task at once, without the retries meant for transient faults."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException, AirflowTaskTimeout

from mavias.errors import as_user_error
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.failures import one_line, record_failure
from mavias.ops.nightly.layout import night_id
from mavias_airflow.hooks import MaviasHook

T = TypeVar("T")
log = logging.getLogger(__name__)


def night_time(context: Any) -> datetime:
    """The logical date names the night; a manual run without one (the context then has no such key) is named after
    when it was triggered."""
    return context.get("logical_date") or context["dag_run"].run_after


def night_of(context: Any) -> str:
    """The night's name (:func:`night_time`)."""
    return night_id(night_time(context))


def run_stage(stage: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``stage(config, *args, **kwargs)`` with the night's config; see the module docstring for its errors."""
    try:
        cfg: NightlyConfig = MaviasHook().get_config()
    except Exception as err:  # noqa: BLE001 - a config that cannot be read is a mistake, explained, not retried
        raise AirflowFailException(f"the nightly configuration cannot be used: {one_line(err)}") from err
    with stage_errors(cfg):
        return stage(cfg, *args, **kwargs)


@contextmanager
def stage_errors(cfg: NightlyConfig | None = None) -> Iterator[None]:
    """The task's error (a timeout too) kept for the night's report with ``cfg`` (read when not given; without a
    nightly config, not kept), and a user mistake failing the task at once."""
    try:
        yield
    except (Exception, AirflowTaskTimeout) as err:
        _record(cfg, err)
        if isinstance(err, Exception) and as_user_error(err) is not None:
            raise AirflowFailException(one_line(err)) from err
        raise


def _record(cfg: NightlyConfig | None, err: BaseException) -> None:
    context = get_current_context()
    try:
        record_failure(cfg or MaviasHook().get_config(), night_of(context), context["ti"].task_id, err)
    except Exception as unrecorded:  # noqa: BLE001 - the task's own error is the one to raise
        log.warning("the error of %s is not kept for the report: %s", context["ti"].task_id, one_line(unrecorded))
