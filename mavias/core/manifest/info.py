"""``dataset.json``: what a dataset declares next to its manifest (protocol, true-group attributes, evaluation splits).

Written by the importers (``mavias data import``), read by :func:`mavias.core.manifest.load_manifest` (which then accepts
the declared evaluation splits besides train/val/test) and by ``mavias evaluate`` (which reports the protocol's metrics).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mavias.errors import UserError
from mavias.utils.atomic import write_json

INFO_NAME = "dataset.json"
STANDARD_SPLITS = ("train", "val", "test")
_SPLIT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

Protocol = Literal["generic", "closed_set", "celeba", "urbancars", "imagenet9"]


class DatasetInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    protocol: Protocol = Field("generic", description="which dataset-specific metrics `mavias evaluate` reports")
    group_attrs: list[str] = Field(default_factory=list, description="attr_* columns that form the true groups")
    eval_splits: list[str] = Field(default_factory=list, description="named evaluation splits beyond train/val/test")
    source: str = Field("", description="where the images were imported from")
    notes: str = ""

    @field_validator("eval_splits")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        for name in names:
            if name in STANDARD_SPLITS or not _SPLIT_NAME.match(name):
                raise ValueError(f"evaluation split {name!r} must be a lower-case identifier other than train/val/test")
        return names


def info_path(manifest_path: str | Path) -> Path:
    return Path(manifest_path).parent / INFO_NAME


def read_dataset_info(manifest_path: str | Path) -> DatasetInfo | None:
    """The ``dataset.json`` next to a manifest, or ``None`` when there is none."""
    path = info_path(manifest_path)
    if not path.exists():
        return None
    try:
        return DatasetInfo.model_validate(json.loads(path.read_text()))
    except (ValidationError, json.JSONDecodeError) as err:
        raise UserError(f"{path} is not a valid dataset description ({err}); re-run `mavias data import`") from None


def write_dataset_info(info: DatasetInfo, manifest_path: str | Path) -> Path:
    return write_json(info_path(manifest_path), info.model_dump(mode="json"))
