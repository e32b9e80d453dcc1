"""The nightly config reference, generated from the models so that it cannot drift from them:
``python -m mavias.ops.nightly.reference > docs/nightly-config.md`` (a test checks the page is current)."""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from mavias.errors import settings
from mavias.ops.nightly.config import NightlyConfig

INTRO = """# Nightly config reference

Every setting of the nightly pipeline's YAML file (`$MAVIAS_NIGHTLY_CONFIG`; start from
`infra/nightly.example.yaml`). Without `$MAVIAS_NIGHTLY_CONFIG` the package's `mavias/ops/nightly/nightly_default.yaml`
is read (bucket `mavias`, workspace `~/.mavias/ops/nightly`): a deployment always sets it. Any setting can be
overridden by `MAVIAS_NIGHTLY__<SECTION>__<KEY>=<YAML value>` and the `s3` section by `MAVIAS_S3_<KEY>`; credentials
never belong in the file. Relative paths in `workspace`, `gates`, `train.config` and `discovery.review` are read
from the YAML file's folder; give `discovery.weights_dir` as an absolute path. The training section's `overrides`
take the dotted keys of a training config (the fields of `TrainConfig` in `mavias/core/train/config.py`, e.g.
`epochs`, `optim.lr`, `mavias.bias_path`; a misspelt one is named with the closest that exists). Generated from
`mavias/ops/nightly/config.py`: `python -m mavias.ops.nightly.reference > docs/nightly-config.md`.
"""


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) in (Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in get_args(annotation))
    if get_origin(annotation) is not None and getattr(get_origin(annotation), "__name__", "") == "Literal":
        return " | ".join(repr(arg) for arg in get_args(annotation))
    if get_origin(annotation) is not None:
        return f"{get_origin(annotation).__name__}[{', '.join(_type_name(a) for a in get_args(annotation))}]"
    return "null" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return ""
    text = "null" if value is None else str(value)
    return f"`{re.sub(r'^.*/mavias/', 'mavias/', text)}`"  # a packaged file by its path in the repository


def _row(name: str, field: Any) -> str:
    description = (field.description or "").replace("|", "\\|").replace("\n", " ")
    return f"| `{name}` | {_type_name(field.annotation).replace('|', '&#124;')} | {_default(field)} | {description} |"


def reference_markdown() -> str:
    """The reference page: one table row per setting, nested sections by their dotted names."""
    header = ["| setting | type | default | what it does |", "|---|---|---|---|"]
    return INTRO + "\n" + "\n".join(header + [_row(name, field) for name, field in settings(NightlyConfig)]) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
