"""The history of nights kept next to the models: headline numbers per night, for the trend plot and the bias drift.

``models/<name>/reports/history.json`` in the bucket (and ``history.json`` in the workspace)::

    {"schema": 1, "nights": [HistoryEntry, ...]}   oldest first, one entry per run id
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from mavias.core.evaluate.metrics import require_columns
from mavias.utils.atomic import write_json

TOP_K = 10
HISTORY_SCHEMA = 1


class HistoryEntry(BaseModel):
    """One night's headline numbers, kept next to the models for the trend plot and the bias drift."""

    date: date
    run_id: str
    version: str
    worst_group_accuracy: float
    worst_group_ci_low: float | None = None
    worst_group_ci_high: float | None = None
    average_accuracy: float
    biased_tags: dict[str, list[str]]  # class -> top-k biased tags, in rank order
    promoted: bool
    audit_rule: int | None = None  # version of the B' rule behind biased_tags; None: recorded before versions were kept


def history_entry(
    *,
    night: date,
    run_id: str,
    version: str,
    evaluation: Mapping[str, Any],
    wg_source: str,
    biased_tags: pd.DataFrame,
    promoted: bool,
    audit_rule: int | None,
) -> HistoryEntry:
    """Tonight's entry from the candidate's evaluate_checkpoint result and the reference's biased tags (computed by
    version ``audit_rule`` of the B' rule)."""
    metrics = evaluation[wg_source]
    return HistoryEntry(
        date=night,
        run_id=run_id,
        version=version,
        worst_group_accuracy=metrics["worst_group_accuracy"],
        worst_group_ci_low=metrics["worst_group_ci_low"],
        worst_group_ci_high=metrics["worst_group_ci_high"],
        average_accuracy=metrics["average_accuracy"],
        biased_tags=biased_tags_by_class(biased_tags),
        promoted=promoted,
        audit_rule=audit_rule,
    )


def load_history(path: str | Path) -> list[HistoryEntry]:
    """Past nights, oldest first; an empty list when the file does not exist yet."""
    path = Path(path)
    return history_from_document(json.loads(path.read_text()), str(path)) if path.exists() else []


def history_from_document(document: Mapping[str, Any], source: str) -> list[HistoryEntry]:
    if document["schema"] != HISTORY_SCHEMA:
        raise ValueError(f"{source}: history schema {document['schema']}, expected {HISTORY_SCHEMA}")
    return [HistoryEntry.model_validate(night) for night in document["nights"]]


def append_history(path: str | Path, *entries: HistoryEntry) -> list[HistoryEntry]:
    """Add ``entries`` (each replacing one with the same run id, so a retried task does not count twice, and a
    night recorded while the bucket was unreachable is merged, not lost); the new history."""
    replaced = {entry.run_id for entry in entries}
    nights = [night for night in load_history(path) if night.run_id not in replaced] + list(entries)
    nights.sort(key=lambda night: night.date)
    write_json(path, {"schema": HISTORY_SCHEMA, "nights": [night.model_dump(mode="json") for night in nights]})
    return nights


def biased_tags_by_class(biased_tags: pd.DataFrame, top_k: int = TOP_K) -> dict[str, list[str]]:
    """Class -> its top-k biased tags in rank order (B' of the ERM reference, with its ``rank`` column)."""
    require_columns(biased_tags, ["class", "tag", "rank"])
    top = biased_tags[biased_tags["rank"] <= top_k].sort_values(["class", "rank"])
    return {str(c): list(tags) for c, tags in top.groupby("class", sort=True)["tag"]}


def bias_drift(previous: Mapping[str, list[str]], current: Mapping[str, list[str]]) -> pd.DataFrame:
    """Per class: tags biased now but not in ``previous`` (``new``) and the other way round (``gone``)."""
    rows = []
    for name in sorted(set(previous) | set(current)):
        before, now = set(previous.get(name, [])), set(current.get(name, []))
        if before != now:
            rows.append({"class": name, "new": sorted(now - before), "gone": sorted(before - now)})
    return pd.DataFrame(rows, columns=["class", "new", "gone"])
