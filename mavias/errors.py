"""The exception types the library raises for what a person must act on, and how other errors map onto them.

A :class:`UserError` is a mistake the user can fix: wrong path, bad config value, missing column; its message says
what is wrong and its ``hint`` what to do. An :class:`ExplainedFailure` is not the user's mistake but a failure whose
message says what failed and what to do (a training run that crashed). Library errors subclass them; the library
never prints or exits: the command line (``mavias.cli.errors``) and the nightly stages (``mavias.ops.nightly.failures``)
decide how to show them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo


class UserError(Exception):
    """A mistake the user can fix: wrong path, bad config value, unsupported file type, missing column…

    ``hint`` says what to do when the message does not; ``str()`` gives both as one line."""

    hint: str | None = None  # also for subclasses whose other bases take the constructor

    def __init__(self, message: str = "", *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class ExplainedFailure(Exception):
    """A failure that is not the user's mistake, explained in one line: what failed, where, and what to do."""


def describe_validation_error(error: ValidationError, *, what: str, model: type[BaseModel] | None = None,
                              show_input: bool = True) -> str:
    """Pydantic's errors as one line per field: ``mavias.lam: Input should be a valid number (got 'x')``; with the
    ``model`` validated, an unknown key also names the closest known one (``did you mean method?``) and a bad value
    what the setting accepts."""
    problems = []
    for item in error.errors(include_url=False):
        key, value = ".".join(str(part) for part in item["loc"]), item.get("input")
        unknown = item["type"] == "extra_forbidden"
        if unknown:
            key, value = _dotted(key, value)  # "no.such.key" as typed, not "no" with the rest as its value
        problem = f"{key or '(top level)'}: {item['msg']}" + (f" (got {value!r})" if show_input else "")
        if model is not None and unknown:
            problem += did_you_mean(key, model)
        elif model is not None and (accepts := setting_description(model, item["loc"])):
            problem += f"; it takes {accepts}"
        problems.append(problem)
    return f"invalid {what}: " + "; ".join(problems)


def _dotted(key: str, value: object) -> tuple[str, object]:
    while isinstance(value, dict) and len(value) == 1:
        ((part, value),) = value.items()
        key = f"{key}.{part}"
    return key, value


def settings(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every setting a model accepts as (dotted name, field), nested models' fields included (``mavias.lam``)."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from settings(annotation, f"{prefix}{name}.")
        else:
            yield prefix + name, field


def setting_names(model: type[BaseModel]) -> list[str]:
    """Every dotted setting a model accepts (``mavias.lam``)."""
    return [name for name, _ in settings(model)]


def setting_description(model: type[BaseModel], loc: tuple) -> str:
    """What the setting at ``loc`` accepts, as its model documents it (``"int: epochs between ..."``), or ``""``."""
    field = None
    for part in loc:
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        if part not in fields:
            return ""
        field = fields[part]
        model = field.annotation
    if field is None:
        return ""
    kind = getattr(field.annotation, "__name__", None) or str(field.annotation).replace("typing.", "")
    return f"{kind}: {field.description}" if field.description else kind


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
        return UserError(describe_validation_error(error, what=error.title),
                         hint="fix the setting named above where it is set (config file, option or environment)")
    if isinstance(error, yaml.YAMLError):
        return UserError(f"not valid YAML: {error}".replace("\n", " "))
    kind = next((kind for kind in PATH_MISTAKES if isinstance(error, kind)), None)
    if kind is not None and error.filename:
        what, hint = PATH_MISTAKES[kind]
        return UserError(f"{error.filename} {what}", hint=hint)
    return None


PATH_MISTAKES: dict[type[OSError], tuple[str, str]] = {
    FileNotFoundError: ("does not exist", "check the path"),
    IsADirectoryError: ("is a folder, not a file", "check the path"),
    NotADirectoryError: ("is not a folder", "check the path: a file stands where a folder is needed"),
    FileExistsError: ("already exists and is in the way", "choose another path, or move it away"),
    PermissionError: ("cannot be used: permission denied", "choose a path this user may read and write, or fix its "
                                                             "permissions"),
}
