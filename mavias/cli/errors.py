"""How the command line shows the library's errors: one red line and an exit status, the traceback only with
``--debug``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from mavias.errors import ExplainedFailure, as_user_error

USER_ERROR_EXIT_CODE = 2
FAILURE_EXIT_CODE = 1


def error_line(error: BaseException) -> str:
    """The one line a person reads: the message and its hint, whitespace folded."""
    return f"error: {' '.join(str(error).split())}"


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
            typer.secho(error_line(error), fg="red", err=True)
            raise typer.Exit(FAILURE_EXIT_CODE) from None
        mistake = None if debug else as_user_error(error)
        if mistake is None:
            raise
        typer.secho(error_line(mistake), fg="red", err=True)
        raise typer.Exit(USER_ERROR_EXIT_CODE) from None
