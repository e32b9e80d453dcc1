"""Nested settings, as YAML files, dotted ``--set`` keys and ``SECTION__KEY`` environment variables write them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from mavias.errors import UserError
from mavias.utils.userfiles import read_text


def set_nested(data: Mapping[str, Any], keys: Sequence[str], value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at the path ``keys``; a non-mapping on the way is replaced by a mapping."""
    head, *rest = keys
    if not rest:
        return {**data, head: value}
    child = data.get(head)
    return {**data, head: set_nested(child if isinstance(child, Mapping) else {}, rest, value)}


def read_yaml_mapping(path: str | Path, *, what: str, error: type[UserError] = UserError) -> dict[str, Any]:
    """The mapping of settings in the YAML file at ``path`` (empty for an empty file); ``error``, naming the file as
    ``what``, when it is not valid YAML or not a mapping."""
    try:
        data = yaml.safe_load(read_text(Path(path), what=what, error=error)) or {}
    except yaml.YAMLError as problem:
        raise error(f"{what} {path} is not valid YAML: {' '.join(str(problem).split())}") from None
    if not isinstance(data, dict):
        raise error(f"{what} {path} must be a mapping of settings, got {type(data).__name__}")
    return data
