"""The one exception type for mistakes a user can fix, and how the command line reports them.

The CLI prints its message (which must say how to fix the mistake) without a traceback and exits with status 2;
``--debug`` shows the traceback. Library errors that are user mistakes subclass it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
import yaml
from pydantic import ValidationError

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """A mistake the user can fix: wrong path, bad config value, unsupported file type, missing column…"""


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
    """A user mistake raised inside ends the command: one red line on stderr, exit status 2.

    With ``debug`` it keeps its traceback; errors that are not user mistakes always do.
    """
    try:
        yield
    except Exception as error:
        mistake = None if debug else as_user_error(error)
        if mistake is None:
            raise
        typer.secho(f"error: {' '.join(str(mistake).split())}", fg="red", err=True)
        raise typer.Exit(USER_ERROR_EXIT_CODE) from None
