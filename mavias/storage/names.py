"""The names that become paths or object keys (partitions, versions, model names): one rule, checked where a name
arrives."""

from __future__ import annotations

import re

from mavias.errors import UserError

# Every name that becomes a path or a key (partitions, versions, model names): no separators, no leading dot.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class UnsafeName(UserError, ValueError):
    """A partition, version or model name that would escape its folder or is not portable."""


def is_safe_name(value: object) -> bool:
    """Letters, digits, '.', '_', '-', starting with a letter or digit, no '..' (and nothing after: no newline)."""
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None and ".." not in value


def check_name(kind: str, value: str) -> str:
    """``value`` if it is a safe name (:func:`is_safe_name`), else UnsafeName."""
    if not is_safe_name(value):
        raise UnsafeName(
            f"invalid {kind} {value!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit "
            "(no '/', no '..')"
        )
    return value
