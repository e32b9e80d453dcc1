"""Prepared data on disk in a form that loads without running code: tensors, plain values, and tables as Parquet
bytes, read with ``torch.load(weights_only=True)``. A file on a shared volume that someone else could write is
then data, never a pickle that executes on load."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.utils.data import Dataset

from mavias.core.train.config import TrainConfig
from mavias.core.train.data import FeatureSplit, ImageSplit, SplitData
from mavias.core.train.decoded import DecodedStore
from mavias.core.train.prepare import PreparedData
from mavias.core.train.transforms import split_transforms
from mavias.errors import UserError
from mavias.utils.atomic import atomic_path
from mavias.utils.torchfile import TORCH_LOAD_ERRORS

FORMAT = "mavias-prepared-3"  # -3 may point at a decoded-image store instead of holding the images
READABLE = ("mavias-prepared-2", FORMAT)


class UnreadablePrepared(UserError):
    """A prepared-data file that is damaged, of another format, or holds code."""


def _table(frame: pd.DataFrame) -> torch.Tensor:
    return torch.frombuffer(bytearray(frame.to_parquet(index=False)), dtype=torch.uint8)


def _frame(table: torch.Tensor) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(table.numpy().tobytes()))


def _inputs_state(inputs: Dataset) -> dict[str, Any]:
    if isinstance(inputs, ImageSplit):
        state = {"kind": "image", "paths": [str(p) for p in inputs.paths], "size": inputs.size, "random": inputs.random}
        if inputs.store is not None:  # the images stay in the store's files, once for every dataset
            return state | {"store": inputs.store.state()}
        return state | {"cache": inputs.cache, "sources": inputs.sources}
    if isinstance(inputs, FeatureSplit):
        return {"kind": "features", "cache": inputs.cache}
    raise TypeError(f"only image and feature splits are saved, not {type(inputs).__name__}")


def _inputs(state: dict[str, Any], config: TrainConfig | None, split: str) -> Dataset:
    if state["kind"] == "features":
        return FeatureSplit(state["cache"].numpy())
    transforms = split_transforms(config or TrainConfig(image_size=state["size"]))
    paths = [Path(p) for p in state["paths"]]
    if "store" in state:
        return ImageSplit(paths, transforms.of(split), state["size"], random=state["random"], plain=transforms.eval,
                          store=DecodedStore.from_state(state["store"]))
    return ImageSplit(paths, transforms.of(split), state["size"], random=state["random"], plain=transforms.eval,
                      preloaded=(state["cache"], state["sources"]))


def _split_state(split: SplitData) -> dict[str, Any]:
    return {"inputs": _inputs_state(split.inputs), "frame": _table(split.frame), "labels": split.labels,
            "embeddings": split.embeddings, "groups": split.groups, "group_names": list(split.group_names)}


def save_prepared(data: PreparedData, path: str | Path) -> Path:
    state = {
        "format": FORMAT, "classes": list(data.classes), "quarantined": _table(data.quarantined),
        "prompts_encoded": data.prompts_encoded, "image_notes": dict(data.image_notes),
        "config": data.config.model_dump(mode="json") if data.config else None,
        "splits": {name: _split_state(split) for name, split in data.splits.items()},
    }
    with atomic_path(Path(path)) as tmp:
        torch.save(state, tmp)
    return Path(path)


def load_prepared(path: str | Path) -> PreparedData:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except TORCH_LOAD_ERRORS as error:
        raise UnreadablePrepared(f"{path} is not prepared data this version can read ({str(error).splitlines()[0]}): "
                                 "delete it and the data is prepared again") from None
    if not isinstance(state, dict) or state.get("format") not in READABLE:
        raise UnreadablePrepared(f"{path} is not prepared data of format {FORMAT}: delete it to prepare it again")
    config = TrainConfig.model_validate(state["config"]) if state["config"] else None
    splits = {
        name: SplitData(_inputs(split["inputs"], config, name), _frame(split["frame"]), split["labels"],
                        split["embeddings"], split["groups"], split["group_names"])
        for name, split in state["splits"].items()
    }
    return PreparedData(state["classes"], splits, _frame(state["quarantined"]), state["prompts_encoded"],
                        state["image_notes"], config)
