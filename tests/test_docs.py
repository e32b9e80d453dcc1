"""Every dotted name the documentation gives in backticks (``mavias.x.y``, or ``train.x.y`` for a package of mavias
or of one of its groups, ``mavias.core.train``) names something that imports, unless it is a key of the nightly config (``train.nproc``) or of the training config
(``mavias.bias_path``)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import mavias
from mavias.core.train.config import TrainConfig
from mavias.ops.nightly.config import NightlyConfig

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted(REPO.glob("docs/*.md")) + [REPO / "README.md"]
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
GROUPS = ("core", "ops", "tools")
PACKAGES = {module.name: f"mavias.{module.name}" for module in pkgutil.iter_modules(mavias.__path__)} | {
    module.name: f"mavias.{group}.{module.name}"
    for group in GROUPS for module in pkgutil.iter_modules(importlib.import_module(f"mavias.{group}").__path__)
}
FILE_SUFFIXES = {"csv", "html", "json", "md", "npy", "onnx", "parquet", "png", "pt", "py", "sqlite", "toml", "txt",
                 "yaml"}  # `relevance.parquet` names a file, not mavias.core.relevance.parquet


def documented_names() -> list[tuple[str, str]]:
    names = set()
    for document in DOCUMENTS:
        for name in DOTTED.findall(document.read_text()):
            head, last = name.split(".")[0], name.rsplit(".", 1)[-1]
            if (head == "mavias" or head in PACKAGES) and last not in FILE_SUFFIXES and not is_config_key(name):
                names.add((document.name, name if head == "mavias" else PACKAGES[head] + name[len(head):]))
    return sorted(names)


def is_config_key(dotted: str) -> bool:
    """A field path of the nightly or the training config, such as ``validation.keep_partial``."""
    return any(_is_field_path(model, dotted) for model in (NightlyConfig, TrainConfig))


def _is_field_path(model: type, dotted: str) -> bool:
    for part in dotted.split("."):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return False
        model = fields[part].annotation
    return True


def resolve(dotted: str) -> object:
    """The longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(dotted)


def test_the_documents_name_code():
    assert len(documented_names()) >= 10  # the pattern still finds the names
    assert is_config_key("train.nproc") and not is_config_key("train.trainer")


@pytest.mark.parametrize(("document", "dotted"), documented_names())
def test_a_documented_name_imports(document, dotted):
    resolve(dotted)


FIGURE = re.compile(r"<!-- figure:([\w-]+) -->(.*?)<!-- /figure -->")
FIGURE_ROW = re.compile(r"^\| `([\w-]+)` \| [^|]+ \| ([^|]+?) \|", re.MULTILINE)


def current_figures() -> dict[str, str]:
    """The "Current figures" table of BENCHMARKS.md: one row per figure the README quotes, by its id."""
    text = (REPO / "BENCHMARKS.md").read_text()
    section = text.split("## Current figures", 1)[1].split("\n## ", 1)[0]
    return dict(FIGURE_ROW.findall(section))


def test_the_readme_quotes_each_figure_as_benchmarks_states_it():
    quoted = FIGURE.findall((REPO / "README.md").read_text())
    figures = current_figures()
    assert quoted and figures
    assert [(name, value) for name, value in quoted if figures.get(name) != value] == []
