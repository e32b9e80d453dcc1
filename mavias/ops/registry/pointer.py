"""The production pointer's document, ``production.json``: every promotion and rollback so far, validated whenever it
is read; the last record is production."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mavias.storage.names import check_name


class PointerRecord(BaseModel):
    """One write of the production pointer."""

    seq: int
    version: str
    action: Literal["promote", "rollback"]
    previous_version: str | None
    at: datetime
    by: str
    token: str  # unique per write, tells a writer whether the pointer holds its own write
    etag: str | None = Field(default=None, exclude=True)  # ETag of the pointer this was read from; see promote()

    @field_validator("version", "previous_version")
    @classmethod
    def _safe_version(cls, value: str | None) -> str | None:
        return value if value is None else check_name("version", value)


class PointerDocument(BaseModel):
    """``production.json``: the model's name and every pointer write, oldest first, numbered 1, 2, ..."""

    name: str
    history: list[PointerRecord]

    @field_validator("history")
    @classmethod
    def _consecutive(cls, history: list[PointerRecord]) -> list[PointerRecord]:
        if [r.seq for r in history] != list(range(1, len(history) + 1)):
            raise ValueError("records must be numbered 1, 2, ... in order")
        if production_stack_or_none(history) is None:
            raise ValueError("a rollback without an earlier promotion")
        return history


@dataclass(frozen=True)
class PointerState:
    """What the pointer holds: its records and ETag (``None``: no pointer), or why it cannot be used."""

    history: list[PointerRecord]
    etag: str | None
    problem: str | None = None


def production_stack_or_none(history: list[PointerRecord]) -> list[str] | None:
    """Versions a rollback walks back through: promotions push, rollbacks pop; ``None`` when a rollback has
    nothing to pop."""
    stack: list[str] = []
    for record in history:
        if record.action == "promote":
            stack.append(record.version)
        elif len(stack) < 2:
            return None
        else:
            stack.pop()
    return stack


def production_stack(history: list[PointerRecord]) -> list[str]:
    """Versions a rollback walks back through; the last one is production."""
    return production_stack_or_none(history) or []
