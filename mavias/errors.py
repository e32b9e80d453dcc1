"""The exception types the command line explains in one line, and how it reports them.

A :class:`UserError` is a mistake the user can fix: the CLI prints its message (which must say how to fix it) without
a traceback and exits with status 2. An :class:`ExplainedFailure` is not the user's mistake but a failure whose
message says what failed and what to do (a training run that crashed): one line, exit status 1. ``--debug`` shows
the traceback of either. Library errors subclass them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
import yaml
from pydantic import ValidationError

USER_ERROR_EXIT_CODE = 2
FAILURE_EXIT_CODE = 1


class UserError(Exception):
    """A mistake the user can fix: wrong path, bad config value, unsupported file type, missing column…"""


class ExplainedFailure(Exception):
    """A failure that is not the user's mistake, explained in one line: what failed, where, and what to do."""


def describe_validation_error(error: ValidationError, *, what: str) -> str:
    """Pydantic's errors as one line per field: ``mavias.lam: Input should be a valid number (got 'x')``."""
    problems = [
        f"{'.'.join(str(part) for part in item['loc']) or '(top level)'}: {item['msg']} (got {item.get('input')!r})"
        for item in error.errors()
    ]
    return f"invalid {what}: " + "; ".join(problems)


def as_user_error(error: BaseException) -> UserError | None:
    """The user mistake behind ``error``, or None when it is a bug (which keeps its traceback)."""
    if isinstance(error, UserError):
        return error
    if isinstance(error, ValidationError):
        return UserError(describe_validation_error(error, what=error.title) + "; fix the config or the --set value")
    if isinstance(error, yaml.YAMLError):
        return UserError(f"not valid YAML: {error}".replace("\n", " "))
    if isinstance(error, (FileNotFoundError, IsADirectoryError, NotADirectoryError)) and error.filename:
        kind = {FileNotFoundError: "does not exist", IsADirectoryError: "is a folder, not a file"}
        return UserError(f"{error.filename} {kind.get(type(error), 'is not a folder')}; check the path")
    return None


@contextmanager
def user_errors_exit(*, debug: bool) -> Iterator[None]:
    """A user mistake raised inside ends the command: one red line on stderr, exit status 2; an explained failure
    likewise, with exit status 1.

    With ``debug`` they keep their traceback; other errors (bugs) always do.
    """
    try:
        yield
    except Exception as error:
        if isinstance(error, ExplainedFailure) and not debug:
            typer.secho(f"error: {' '.join(str(error).split())}", fg="red", err=True)
            raise typer.Exit(FAILURE_EXIT_CODE) from None
        mistake = None if debug else as_user_error(error)
        if mistake is None:
            raise
        typer.secho(f"error: {' '.join(str(mistake).split())}", fg="red", err=True)
        raise typer.Exit(USER_ERROR_EXIT_CODE) from None
