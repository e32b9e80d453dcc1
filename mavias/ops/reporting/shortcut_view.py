"""The report's view of B': per class, its shortcuts with their evidence (association, reliance, support) and what
changed since the previous night, or why it has none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from mavias.core.evaluate.shortcuts import carries_over
from mavias.ops.reporting.context import ReportContext
from mavias.ops.reporting.examples import Example, example_name
from mavias.ops.reporting.history import TOP_K

WITHIN_ONLY = "within the class only"
WITHIN_ONLY_MEANING = ("the reference leans on it for the class's own images, not for other classes' images that carry "
                       "it: a co-object the model uses beside the object, or a part of the object the judge called "
                       "irrelevant; check its relevance decision")
WITHIN_ONLY_LEGEND = f"({WITHIN_ONLY}: {WITHIN_ONLY_MEANING})"


def _number(value: Any) -> float | None:
    number = pd.to_numeric(value, errors="coerce")
    return None if pd.isna(number) else float(number)


def _fixed(value: Any, digits: int = 2) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.{digits}f}"


def _q(value: Any) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.1g}"


def evidence(row: Mapping[str, Any]) -> dict[str, str]:
    """One shortcut's evidence as three short phrases."""
    support = _number(row.get("support"))
    class_n, others = _number(row.get("class_n")), _number(row.get("others_with_tag"))
    return {
        "support": "–" if support is None else f"{support:.0f} of {class_n or 0:.0f} training images of the class"
                   + ("" if others is None else f" ({others:.0f} of the other classes')"),
        "association": f"log odds {_fixed(row.get('log_odds'), 1)} [{_fixed(row.get('log_odds_ci_low'), 1)}, "
                       f"{_fixed(row.get('log_odds_ci_high'), 1)}], q {_q(row.get('association_q'))}",
        "reliance": f"effect {_fixed(row.get('score'))} (within-class AUC {_fixed(row.get('within_auc'))}, "
                    f"other classes' AUC {_fixed(row.get('cross_auc'))}), q {_q(row.get('reliance_q'))}",
    }


@dataclass(frozen=True)
class ClassShortcuts:
    name: str
    shortcuts: list[dict[str, Any]]  # tag, new, within_only (relied on within the class only), evidence phrases,
    # example (image: its strip's name, caption, same_as: the first tag of the class with these images, itself when
    # the strip is shown under it; None: no images), rows (2 when its images take a row of their own)
    gone: list[str]  # shortcuts of the previous night that are not any more
    reason: str  # why the class has no shortcut ("" when it has)
    missing_from_evaluation: bool = False


def class_shortcuts(context: ReportContext, drift: pd.DataFrame | None) -> list[ClassShortcuts]:
    """Every class with B' rows or a status line, in name order; ``drift``: new and gone tags per class."""
    biased = context.biased_tags
    top = biased[pd.to_numeric(biased["rank"], errors="coerce") <= TOP_K] if len(biased) else biased
    top = top.assign(within_only=~carries_over(top))
    status = context.shortcut_status
    status_rows = {} if status is None else {str(r["class"]): r for r in status.to_dict("records")}
    changes = {} if drift is None else {r["class"]: r for r in drift.to_dict("records")}
    names = sorted({*map(str, top["class"]), *status_rows, *changes})
    views = []
    for name in names:
        rows = top[top["class"] == name].sort_values("rank")
        new = set(changes.get(name, {}).get("new", []))
        shortcuts = [{"tag": r["tag"], "new": r["tag"] in new, "within_only": bool(r["within_only"]), **evidence(r)}
                     for r in rows.to_dict("records")]
        _attach_examples(name, shortcuts, context.shortcut_examples.get(name, {}))
        info = status_rows.get(name, {})
        n_eval = _number(info.get("n_eval"))
        views.append(ClassShortcuts(
            name, shortcuts, list(changes.get(name, {}).get("gone", [])),
            "" if shortcuts else str(info.get("reason") or ""), n_eval == 0))
    return views


def _attach_examples(name: str, shortcuts: list[dict[str, Any]], examples: Mapping[str, Example]) -> None:
    """Each shortcut's example strip: its image name and caption, or the earlier shortcut of the class whose images
    are the same (tags the tagger gives together, such as a background's words)."""
    first_with: dict[bytes, str] = {}
    for shortcut in shortcuts:
        example = examples.get(shortcut["tag"])
        shortcut["example"] = None if example is None else {
            "image": example_name(example.png), "same_as": first_with.setdefault(example.png, shortcut["tag"]),
            "caption": _caption(name, example)}
        shown = shortcut["example"] is not None and shortcut["example"]["same_as"] == shortcut["tag"]
        shortcut["rows"] = 2 if shown else 1  # its images in a row of their own, under its evidence


def _caption(name: str, example: Example) -> str:
    sides = [f"{example.in_class} of {name}" if example.in_class else "", f"{example.others} of other classes"
             if example.others else ""]
    return "validation images carrying it: " + ", then ".join(side for side in sides if side)


def shortcut_lines(views: list[ClassShortcuts]) -> list[str]:
    """The plain-text version (the email's text part)."""
    lines = []
    for view in views:
        tags = ", ".join(f"{s['tag']}{' (new)' if s['new'] else ''}{f' ({WITHIN_ONLY})' if s['within_only'] else ''}"
                         for s in view.shortcuts)
        line = f"  {view.name}: {tags or 'none'}" + (f" ({view.reason})" if view.reason else "")
        if view.gone:
            line += f"; no longer: {', '.join(view.gone)}"
        if view.missing_from_evaluation:
            line += "; no image of this class in the evaluation set: its groups are not measured"
        lines.append(line)
    if any(s["within_only"] for view in views for s in view.shortcuts):
        lines.append(f"  {WITHIN_ONLY_LEGEND}")
    return lines
