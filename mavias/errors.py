"""The exception types the command line explains in one line, and how it reports them.

A :class:`UserError` is a mistake the user can fix: the CLI prints its message (which must say how to fix it) without
a traceback and exits with status 2. An :class:`ExplainedFailure` is not the user's mistake but a failure whose
message says what failed and what to do (a training run that crashed): one line, exit status 1. ``--debug`` shows
the traceback of either. Library errors subclass them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from contextlib import contextmanager

import typer
import yaml
from pydantic import BaseModel, ValidationError

USER_ERROR_EXIT_CODE = 2
FAILURE_EXIT_CODE = 1


class UserError(Exception):
    """A mistake the user can fix: wrong path, bad config value, unsupported file type, missing column…"""


class ExplainedFailure(Exception):
    """A failure that is not the user's mistake, explained in one line: what failed, where, and what to do."""


def describe_validation_error(error: ValidationError, *, what: str, model: type[BaseModel] | None = None) -> str:
    """Pydantic's errors as one line per field: ``mavias.lam: Input should be a valid number (got 'x')``; with the
    ``model`` validated, an unknown key also names the closest known one (``did you mean method?``)."""
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        hint = did_you_mean(key, model) if model is not None and item["type"] == "extra_forbidden" else ""
        problems.append(f"{key or '(top level)'}: {item['msg']} (got {item.get('input')!r}){hint}")
    return f"invalid {what}: " + "; ".join(problems)


def setting_names(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted setting a model accepts, nested models' fields included (``mavias.lam``)."""
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += setting_names(annotation, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    return names


def did_you_mean(key: str, model: type[BaseModel]) -> str:
    """``"; did you mean X?"`` for the known setting an unknown ``key`` most likely meant: one whose last part it is
    (``lam`` -> ``mavias.lam``), else the closest spelling beside it (``methd`` -> ``method``); or ``""``."""
    names = setting_names(model)
    parent, _, leaf = key.rpartition(".")
    exact = [name for name in names if name.rsplit(".", 1)[-1] == leaf]
    siblings = {name.rpartition(".")[2]: name for name in names if name.rpartition(".")[0] == parent}
    close = exact or [siblings[m] for m in difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)]
    return f"; did you mean {close[0]}?" if close else ""


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
