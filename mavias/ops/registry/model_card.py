"""The model card (``model_card.json``) published with every model version: what it is, how it was made and how good
it is. Written by the export (:func:`mavias.ops.export.version.build_model_card`), read by the model server, which
checks the ONNX file against its sha256."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from mavias.utils.atomic import write_json
from mavias.utils.disk import sha256_file

CARD_NAME = "model_card.json"  # in every version folder, beside the ONNX file it names
CARD_SCHEMA_VERSION = 1


class DataLineage(BaseModel):
    """Which data made the model: the partitions trained on and the sha256 of every input artifact."""

    model_config = ConfigDict(frozen=True)

    partitions: list[str]
    artifacts: dict[str, str]  # artifact name (e.g. "manifest", "relevance", "embeddings") -> sha256


def lineage_from_files(partitions: list[str], artifacts: Mapping[str, str | Path]) -> DataLineage:
    return DataLineage(partitions=sorted(partitions), artifacts={k: sha256_file(p) for k, p in artifacts.items()})


def write_model_card(path: str | Path, card: Mapping[str, Any]) -> Path:
    """Write the card atomically; it must be strict JSON (no NaN, no numpy scalars), checked before writing."""
    json.dumps(card, allow_nan=False)
    return write_json(path, dict(card))
