"""A class's own name is never a potential bias: a tag that names the class (in any case, with ``_`` or ``-`` for a
space, or as a regular plural) is relevant whatever a judge would say, so no judge mistake on it can hand the bias
path the label. The rule decides before any judge is asked; a human review still wins over it."""

from __future__ import annotations

CLASS_NAME_SOURCE = "class name"  # a relevance row's source when this rule decided it


def normalize_tag(tag: str) -> str:
    """A tag as the judges compare it: lower case, ``_`` for a space, single spaces."""
    return " ".join(tag.strip().lower().replace("_", " ").split())


def _forms(name: str) -> set[str]:
    """The name and its regular English plurals (the last word's)."""
    forms = {name, f"{name}s", f"{name}es"}
    if name.endswith("y"):
        forms.add(f"{name[:-1]}ies")
    return forms


def names_class(tag: str, class_name: str) -> bool:
    """Whether ``tag`` is ``class_name`` itself, in another case, spacing or number."""
    tag, name = (normalize_tag(text.replace("-", " ")) for text in (tag, class_name))
    return bool(tag and name) and (tag in _forms(name) or name in _forms(tag))
