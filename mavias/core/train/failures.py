"""Training errors that escape become one readable line: what failed, in which run and epoch, and what to do."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mavias.errors import ExplainedFailure, UserError


class TrainingFailed(ExplainedFailure):
    """A training run crashed; the message names the run, the epoch and the original error."""


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


@contextmanager
def explained_training_errors(method: str, run_dir: Path, epoch: Callable[[], int]) -> Iterator[None]:
    """Any error but a user mistake raised inside becomes :class:`TrainingFailed` (the original is its cause, for
    ``--debug``)."""
    try:
        yield
    except (UserError, ExplainedFailure):
        raise
    except Exception as error:  # noqa: BLE001 - every other escape is explained, the original chained
        when = f"in epoch {epoch()}" if epoch() else "before its first epoch"
        raise TrainingFailed(
            f"training {method} in {run_dir} failed {when}: {_first_line(error)}. The run folder keeps "
            "its last finished epoch and resumes from it; `mavias --debug ...` shows the traceback"
        ) from error
