"""Relevance tables: which tags are intrinsic to which class; every other tag of an image is a potential bias, except
a tag that names another class of the task."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from mavias.errors import UserError
from mavias.utils.atomic import atomic_path
from mavias.utils.tables import read_parquet_or_csv

RELEVANCE_COLUMNS = ["class", "tag", "relevant", "source"]
TRUE_WORDS, FALSE_WORDS = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})


class RelevanceError(UserError, ValueError):
    """A relevance table that breaks its contract, or tags without a decision."""


def validate_relevance(table: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in RELEVANCE_COLUMNS if c not in table.columns]
    if missing:
        raise RelevanceError(
            f"relevance table lacks column(s) {missing}; add them (expected columns: {', '.join(RELEVANCE_COLUMNS)})"
        )
    table = table[RELEVANCE_COLUMNS].copy()
    if table["relevant"].dtype != bool:  # "false" as text is truthy to astype(bool): read the words instead
        table["relevant"] = _parse_flags(table["relevant"], "relevance table")
    dup = table.duplicated(["class", "tag"], keep=False)
    if dup.any():
        pairs = table.loc[dup, ["class", "tag"]].drop_duplicates().head(3).values.tolist()
        raise RelevanceError(f"{int(dup.sum())} duplicated (class, tag) decisions, e.g. {pairs}")
    return table.reset_index(drop=True)


def _parse_flags(values: pd.Series, source: Path | str) -> pd.Series:
    if pd.api.types.is_numeric_dtype(values) and values.isin([0, 1]).all():
        return values.astype(bool)
    words = values.astype(str).str.strip().str.lower().where(values.notna(), "")
    bad = ~words.isin(TRUE_WORDS | FALSE_WORDS)
    if bad.any():
        rows = [str(i + 1) for i in values.index[bad]]  # data rows counted from 1 under the header
        shown = ", ".join(rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
        held = sorted({str(v).strip() for v in values[bad]})[:5]
        raise RelevanceError(f"{source}: column 'relevant' holds {held} on data "
                             f"row(s) {shown}; write true/false (or 1/0)")
    return words.isin(TRUE_WORDS)


def read_relevance_table(path: Path) -> pd.DataFrame:
    table = read_parquet_or_csv(path, what="relevance table", error=RelevanceError)
    if "relevant" in table.columns and table["relevant"].dtype != bool:
        table["relevant"] = _parse_flags(table["relevant"], path)
    return table


def load_relevance(path: str | Path, *, default_source: str | None = None) -> pd.DataFrame:
    """A relevance table from Parquet or CSV (``relevant`` as true/false), validated.

    ``default_source`` fills a missing ``source`` column (a hand-written ground truth rarely has one).
    """
    path = Path(path)
    table = read_relevance_table(path)
    if default_source is not None and "source" not in table.columns:
        table = table.assign(source=default_source)
    try:
        return validate_relevance(table)
    except RelevanceError as error:
        raise RelevanceError(f"{path}: {error}") from None


def save_relevance(table: pd.DataFrame, path: str | Path) -> Path:
    """Write ``table``, validated, as CSV where ``path`` ends in ``.csv`` (``relevant`` as true/false), else Parquet."""
    table = validate_relevance(table)
    with atomic_path(path) as tmp:
        if Path(path).suffix == ".csv":
            table.assign(relevant=table["relevant"].map({True: "true", False: "false"})).to_csv(tmp, index=False)
        else:
            table.to_parquet(tmp, index=False)
    return Path(path)


def normalize_tag(tag: str) -> str:
    """A tag as the judges compare it: lower case, ``_`` for a space, single spaces."""
    return " ".join(tag.strip().lower().replace("_", " ").split())


def _forms(name: str) -> set[str]:
    """The name and its regular English plurals (the last word's)."""
    forms = {name, f"{name}s", f"{name}es"}
    if name.endswith("y"):
        forms.add(f"{name[:-1]}ies")
    return forms


def _name_of(text: str) -> str:
    return normalize_tag(text.replace("-", " "))


def class_naming_tags(tags: Iterable[str], classes: Iterable[str]) -> set[str]:
    """The tags that are one of ``classes`` itself, in another case, spacing (``_``, ``-``) or number."""
    names = {name for name in map(_name_of, map(str, classes)) if name}
    forms = set().union(*map(_forms, names))
    return {tag for tag in tags if (name := _name_of(tag)) and (name in forms or _forms(name) & names)}


def names_class(tag: str, class_name: str) -> bool:
    """Whether ``tag`` is ``class_name`` itself, in another case, spacing or number."""
    return bool(class_naming_tags([tag], [class_name]))


def irrelevant_tags(labels: pd.Series, tags: pd.Series, relevance: pd.DataFrame, *,
                    keep_class_names: bool = False) -> pd.Series:
    """Per sample, the sorted tags that are not relevant to its class (B_i = T_i minus relevant(y_i)) and name no
    other class of the task (the labels' and the relevance table's).

    A tag naming another class is left out whatever the judge says (the paper keeps it, and so does
    ``keep_class_names``, the paper presets' setting): on a single-label image a tagger names another class mostly
    when it confuses the object, so the word is a proxy of the label and the bias path would explain the label away.
    Every (class, tag) pair must have a decision: an undecided tag is an error, never silently a bias or not.
    """
    relevance = validate_relevance(relevance)
    decided = {(c, t): r for c, t, r in relevance[["class", "tag", "relevant"]].itertuples(index=False)}
    classes = set() if keep_class_names else {*relevance["class"], *labels}
    naming = class_naming_tags(set(relevance["tag"]).union(*map(set, tags)), classes)
    named = {tag: {name for name in classes if names_class(tag, name)} for tag in naming}
    undecided: set[tuple[str, str]] = set()
    result = []
    for label, sample_tags in zip(labels, tags):
        kept = []
        for tag in sorted(set(sample_tags)):
            verdict = decided.get((label, tag))
            if verdict is None:
                undecided.add((label, tag))
            elif not verdict and not named.get(tag, set()) - {label}:
                kept.append(tag)
        result.append(kept)
    if undecided:
        examples = sorted(undecided)[:5]
        raise RelevanceError(
            f"{len(undecided)} (class, tag) pair(s) have no relevance decision, e.g. {examples}; run `mavias judge` first"
        )
    return pd.Series(result, index=labels.index, name="irrelevant_tags")
