"""Running a stage of the nightly flow as an Airflow task: its error is kept for the report, in one line, and a user
mistake (a configuration error, an unsafe name, a missing evaluation set: any ``UserError``) fails the task at once,
without the retries meant for transient faults."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException

from mavias.errors import as_user_error
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.failures import one_line, record_failure
from mavias.ops.nightly.layout import night_id
from mavias_airflow.hooks import MaviasHook

T = TypeVar("T")


def night_time(context: Any) -> datetime:
    """The logical date names the night; a manual run without one (the context then has no such key) is named after
    when it was triggered."""
    return context.get("logical_date") or context["dag_run"].run_after


def night_of(context: Any) -> str:
    """The night's name (:func:`night_time`)."""
    return night_id(night_time(context))


def run_stage(stage: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``stage(config, *args, **kwargs)`` with the night's config; see the module docstring for its errors."""
    context = get_current_context()
    try:
        cfg: NightlyConfig = MaviasHook().get_config()
    except Exception as err:  # noqa: BLE001 - a config that cannot be read is a mistake, explained, not retried
        raise AirflowFailException(f"the nightly configuration cannot be used: {one_line(err)}") from err
    try:
        return stage(cfg, *args, **kwargs)
    except Exception as err:
        record_failure(cfg, night_of(context), context["ti"].task_id, err)
        if as_user_error(err) is not None:
            raise AirflowFailException(one_line(err)) from err
        raise
