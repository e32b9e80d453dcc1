"""Training data: a manifest split (images) or a feature table, with per-sample embeddings and group ids."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from mavias.core.manifest import resolve_uri
from mavias.core.train.decoded import DecodedStore
from mavias.core.train.transforms import DECODE, ResizedCropFlip, Transform, load_transformed
from mavias.utils.progress import progress_bar

PRELOAD_LIMIT_BYTES = 2 * 1024**3
FEATURE_PREFIX = "x"


Preloaded = tuple[torch.Tensor | None, list[torch.Tensor] | None]  # an ImageSplit's (cache, sources)


class ImageSplit(Dataset):
    """Images of one split as uint8 [3, H, W] after ``transform``.

    A deterministic (evaluation) transform whose outputs fit in ``PRELOAD_LIMIT_BYTES`` is applied once and the
    tensors held in memory (the small synthetic benchmarks). With a random (augmenting) transform the decoded
    images are held instead, when they fit, and transformed anew per item; a split too large decodes lazily per
    item, in DataLoader workers when configured. With a ``store``, held images come from (and go to) its files, so
    an image is decoded once across datasets.
    """

    def __init__(self, paths: list[Path], transform: Transform, size: int, *, random: bool = False,
                 plain: Transform | None = None, progress: str | None = None, preloaded: Preloaded | None = None,
                 store: DecodedStore | None = None):
        self.paths = paths
        self.transform = transform
        self.size = size
        self.random = random
        self.plain = plain  # the evaluation transform of an augmented split: what the images look like unaugmented
        self.store = store
        self.cache: torch.Tensor | None = None
        self.sources: list[torch.Tensor] | None = None
        if preloaded is not None:  # restored from a saved split: nothing is decoded again
            self.cache, self.sources = preloaded
        elif not random and len(paths) * 3 * size * size <= PRELOAD_LIMIT_BYTES:
            images = self._decode(transform, progress)
            self.cache = torch.stack(images) if images else torch.empty(0, 3, size, size, dtype=torch.uint8)
        elif random and paths and len(paths) * load_transformed(paths[0], DECODE).numel() <= PRELOAD_LIMIT_BYTES:
            self.sources = self._decode(DECODE, progress)

    def _decode(self, transform: Transform, progress: str | None) -> list[torch.Tensor]:
        if self.store is not None:
            return self.store.load(self.paths, transform, progress)
        return [load_transformed(p, transform)
                for p in progress_bar(self.paths, desc=progress or "loading images", enabled=bool(progress))]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.cache is not None:
            return self.cache[i]
        if self.sources is not None:
            return self.transform(self.sources[i])
        return load_transformed(self.paths[i], self.transform)

    def __getitems__(self, rows: list[int]) -> list[torch.Tensor]:
        """A DataLoader's batch: held images of one shape are augmented together (:class:`ResizedCropFlip`)."""
        if self.cache is None and self.sources is not None and isinstance(self.transform, ResizedCropFlip):
            images = [self.sources[i] for i in rows]
            if len({image.shape for image in images}) == 1 and self.transform.can_batch(images[0].shape):
                return list(self.transform.batch(torch.stack(images)))
        return [self[i] for i in rows]

    def unaugmented(self) -> ImageSplit:
        """The same images through the evaluation transform (an augmented split's errors, as JTT counts them)."""
        if not self.random:
            return self
        return ImageSplit(self.paths, self.plain or self.transform, self.size, store=self.store)

    def subset(self, rows: np.ndarray) -> ImageSplit:
        """The images at ``rows``, from what is held in memory (copied rows; nothing is decoded again)."""
        cache = None if self.cache is None else self.cache[torch.as_tensor(rows)]
        sources = None if self.sources is None else [self.sources[i] for i in rows]
        return ImageSplit([self.paths[i] for i in rows], self.transform, self.size, random=self.random,
                          plain=self.plain, preloaded=(cache, sources), store=self.store)


class FeatureSplit(Dataset):
    def __init__(self, features: np.ndarray):
        self.cache = torch.tensor(np.array(features, dtype=np.float32))

    def __len__(self) -> int:
        return len(self.cache)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.cache[i]

    def subset(self, rows: np.ndarray) -> FeatureSplit:
        return FeatureSplit(self.cache[torch.as_tensor(rows)].numpy())


class IndexedInputs(Dataset):
    """Yields (input, index) so per-sample tensors (labels, embeddings, groups) are gathered by index."""

    def __init__(self, inputs: Dataset):
        self.inputs = inputs

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int):
        return self.inputs[i], i

    def __getitems__(self, rows: list[int]) -> list:
        """A DataLoader's batch of (input, index), fetched together where the inputs can (:class:`ImageSplit`)."""
        fetch = getattr(self.inputs, "__getitems__", None)
        images = fetch(rows) if fetch else [self.inputs[i] for i in rows]
        return list(zip(images, rows, strict=True))


@dataclass
class SplitData:
    """One split: inputs plus aligned per-sample tables (``frame`` keeps sample_id, label, tags, attributes)."""

    inputs: Dataset
    frame: pd.DataFrame
    labels: torch.Tensor
    embeddings: torch.Tensor | None = None
    groups: torch.Tensor | None = None
    group_names: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def in_channels(self) -> int:
        return int(self.inputs[0].shape[0])

    @property
    def is_image(self) -> bool:
        return isinstance(self.inputs, ImageSplit)

    @property
    def image_size(self) -> int | None:
        return self.inputs.size if isinstance(self.inputs, ImageSplit) else None

    @property
    def augmented(self) -> bool:
        """Drawn through a random (augmenting) transform."""
        return isinstance(self.inputs, ImageSplit) and self.inputs.random

    def unaugmented(self) -> SplitData:
        """The split seen through the evaluation transform (itself when nothing is augmented)."""
        if not self.augmented:
            return self
        return dataclasses.replace(self, inputs=self.inputs.unaugmented())

    def subset(self, rows: np.ndarray) -> SplitData:
        """The samples at ``rows`` (in that order) with their tables, embeddings and groups."""
        index = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        return dataclasses.replace(
            self, inputs=self.inputs.subset(index.numpy()), frame=self.frame.iloc[index.numpy()].reset_index(drop=True),
            labels=self.labels[index], embeddings=None if self.embeddings is None else self.embeddings[index],
            groups=None if self.groups is None else self.groups[index])


def class_index(classes: list[str], labels: pd.Series) -> torch.Tensor:
    lookup = {c: i for i, c in enumerate(classes)}
    unknown = sorted(set(labels) - set(lookup))
    if unknown:
        raise ValueError(f"labels {unknown[:5]} are not among the model's classes {classes}")
    return torch.tensor([lookup[c] for c in labels], dtype=torch.long)


def image_split(frame: pd.DataFrame, manifest_dir: Path, classes: list[str], transform: Transform, size: int, *,
                random: bool = False, plain: Transform | None = None, progress: bool = True,
                store: DecodedStore | None = None) -> SplitData:
    frame = frame.reset_index(drop=True)
    paths = [resolve_uri(manifest_dir, u) for u in frame["uri"]]
    split = frame["split"].iloc[0] if len(frame) else "?"
    inputs = ImageSplit(paths, transform, size, random=random, plain=plain,
                        progress=f"loading {split} images" if progress else None, store=store)
    return SplitData(inputs, frame, class_index(classes, frame["label"]))


def feature_columns(frame: pd.DataFrame) -> list[str]:
    return sorted((c for c in frame.columns if c.startswith(FEATURE_PREFIX) and c[1:].isdigit()), key=lambda c: int(c[1:]))


def feature_split(frame: pd.DataFrame, classes: list[str]) -> SplitData:
    frame = frame.reset_index(drop=True)
    return SplitData(FeatureSplit(frame[feature_columns(frame)].to_numpy()), frame, class_index(classes, frame["label"]))


def attach_groups(split: SplitData, group_names: pd.Series, vocabulary: list[str]) -> None:
    """Integer group ids from group names, over a fixed vocabulary shared by all splits."""
    lookup = {g: i for i, g in enumerate(vocabulary)}
    split.groups = torch.tensor([lookup[g] for g in group_names], dtype=torch.long)
    split.group_names = list(vocabulary)
