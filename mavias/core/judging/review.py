"""Reviewed decisions: a YAML file of human verdicts per class and tag that overrides any judge.

Format (``version: 1``)::

    version: 1
    decisions:
      landbird:
        relevant: [beak, feather, wing]
        irrelevant: [branch, forest, sky]

Tags match case-insensitively; class names match exactly. ``mavias judge export-review`` writes the current
decisions in this format for a person to edit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mavias.core.relevance import validate_relevance
from mavias.errors import UserError, describe_validation_error
from mavias.utils.atomic import atomic_path

REVIEW_SOURCE = "review"
HEADER = """\
# Reviewed relevance decisions (mavias judge). Edit freely: move a tag between `relevant` and `irrelevant`,
# delete tags you do not want to decide by hand. These verdicts override every judge on the next `mavias judge run`.
"""


def _key(tag: str) -> str:
    return tag.strip().lower()


class ClassDecisions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    relevant: list[str] = Field(default_factory=list)
    irrelevant: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _disjoint(self) -> ClassDecisions:
        both = sorted({_key(t) for t in self.relevant} & {_key(t) for t in self.irrelevant})
        if both:
            raise ValueError(f"tag(s) both relevant and irrelevant: {both}")
        return self


class ReviewedDecisions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    decisions: dict[str, ClassDecisions] = Field(default_factory=dict)

    def verdicts(self, class_name: str, tags: list[str]) -> dict[str, bool]:
        """The reviewed verdict of each of ``tags`` that has one."""
        reviewed = self.decisions.get(class_name)
        if reviewed is None:
            return {}
        known = {_key(t): True for t in reviewed.relevant} | {_key(t): False for t in reviewed.irrelevant}
        return {tag: known[_key(tag)] for tag in tags if _key(tag) in known}

    def unmatched(self, tags_by_class: Mapping[str, Iterable[str]]) -> list[str]:
        """Warnings (one line each) for the reviewed classes the data lacks and the reviewed tags no image of their
        class carries: their verdicts decide nothing."""
        classes = sorted(map(str, tags_by_class))
        warnings = []
        if unknown := sorted(set(self.decisions) - set(classes)):
            warnings.append(f"the reviewed decisions name {len(unknown)} class(es) the data does not have "
                            f"({', '.join(unknown)}): their verdicts apply to nothing; class names match exactly, "
                            f"rename them to one of the data's classes ({_first(classes)})")
        absent = [f"{name}: {tag}" for name in sorted(set(self.decisions) & set(classes))
                  for tag in self._tags_absent(name, tags_by_class[name])]
        if absent:
            warnings.append(f"the reviewed decisions name {len(absent)} tag(s) their class does not have "
                            f"({_first(absent)}): their verdicts apply to nothing; check their spelling against a "
                            "fresh `mavias judge export-review` (tags match case-insensitively)")
        return warnings

    def _tags_absent(self, class_name: str, tags: Iterable[str]) -> list[str]:
        reviewed = self.decisions[class_name]
        present = {_key(tag) for tag in tags}
        return sorted({t for t in reviewed.relevant + reviewed.irrelevant if _key(t) not in present}, key=_key)


def _first(names: list[str], count: int = 10) -> str:
    return ", ".join(names[:count]) + (", ..." if len(names) > count else "")


def tags_of_classes(relevance: pd.DataFrame, classes: Iterable[str] = ()) -> dict[str, set[str]]:
    """The tags a relevance table decides for each class (every tag the class's images carry), and no tag for each
    of ``classes`` (the data's labels) it lacks."""
    return {str(name): set() for name in classes} | {str(name): set(rows["tag"])
                                                      for name, rows in relevance.groupby("class")}


class ReviewError(UserError, ValueError):
    """A reviewed-decisions file that cannot be read."""


def load_review(path: str | Path) -> ReviewedDecisions:
    path = Path(path)
    if not path.is_file():
        raise ReviewError(f"reviewed decisions {path} do not exist; write them with `mavias judge export-review`")
    try:
        return ReviewedDecisions.model_validate(yaml.safe_load(path.read_text()) or {})
    except yaml.YAMLError as error:
        raise ReviewError(f"reviewed decisions {path} are not valid YAML: {error}") from None
    except ValidationError as error:
        raise ReviewError(describe_validation_error(error, what=f"reviewed decisions {path}")) from None


def apply_review(table: pd.DataFrame, review: ReviewedDecisions) -> pd.DataFrame:
    """Override the table's decisions with the reviewed ones (``source="review"``)."""
    table = validate_relevance(table)
    for class_name, rows in table.groupby("class"):
        for tag, verdict in review.verdicts(str(class_name), rows["tag"].tolist()).items():
            index = rows.index[rows["tag"] == tag]
            table.loc[index, ["relevant", "source"]] = [verdict, REVIEW_SOURCE]
    return table


def review_from_table(table: pd.DataFrame) -> ReviewedDecisions:
    table = validate_relevance(table)
    return ReviewedDecisions(
        decisions={
            str(class_name): ClassDecisions(
                relevant=sorted(rows.loc[rows["relevant"], "tag"]),
                irrelevant=sorted(rows.loc[~rows["relevant"], "tag"]),
            )
            for class_name, rows in table.groupby("class")
        }
    )


def export_review(table: pd.DataFrame, path: str | Path) -> Path:
    """Write the table's decisions as a reviewed-decisions YAML file for a person to edit."""
    document = review_from_table(table).model_dump(mode="json")
    with atomic_path(path) as tmp:
        tmp.write_text(HEADER + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120))
    return Path(path)
