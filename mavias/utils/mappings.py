"""Nested settings, as YAML files, dotted ``--set`` keys and ``SECTION__KEY`` environment variables write them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def set_nested(data: Mapping[str, Any], keys: Sequence[str], value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at the path ``keys``; a non-mapping on the way is replaced by a mapping."""
    head, *rest = keys
    if not rest:
        return {**data, head: value}
    child = data.get(head)
    return {**data, head: set_nested(child if isinstance(child, Mapping) else {}, rest, value)}
