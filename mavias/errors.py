"""The one exception type for mistakes a user can fix, and how the command line reports them.

The CLI prints its message (which must say how to fix the mistake) without a traceback and exits with status 2;
``--debug`` shows the traceback. Library errors that are user mistakes subclass it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from contextlib import contextmanager

import typer
import yaml
from pydantic import BaseModel, ValidationError

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """A mistake the user can fix: wrong path, bad config value, unsupported file type, missing column…"""


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
