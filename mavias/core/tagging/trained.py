"""A small multi-label image tagger, trained on images whose tags are known, that tags what it sees: one sigmoid
output per vocabulary word on the small CNN backbone of the training package, a word kept when its probability
reaches its cut-off (its score is that probability): the checkpoint's ``threshold`` unless the reader sets another.

It is the built-in benchmarks' tagger (:mod:`mavias.core.synthetic.tagger`): trained on images drawn with every
attribute independent of the class, so what it learns of a word comes from the word's own pixels; small, briefly
trained and at low resolution, it misses small or low-contrast things and confuses neighbours as a real tagger does.
Training is deterministic per seed. A checkpoint holds its vocabulary and settings (:data:`CHECKPOINT_KEYS`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from mavias.core.tagging.base import ScoredTags, TagBatch
from mavias.core.train.config import BackboneConfig
from mavias.core.train.model import MainModel, build_main_model
from mavias.errors import UserError
from mavias.utils.atomic import atomic_path
from mavias.utils.progress import progress_bar
from mavias.utils.torchfile import TORCH_LOAD_ERRORS

CHECKPOINT_KEYS = ("vocabulary", "settings", "state")


@dataclass(frozen=True)
class TaggerTraining:
    image_size: int = 24  # the tagger looks at the images at this size
    width: int = 16  # small CNN base channels
    epochs: int = 10
    batch_size: int = 64
    lr: float = 3e-3  # Adam
    threshold: float = 0.5
    seed: int = 0


class TaggerCheckpointError(UserError, ValueError):
    """A tagger checkpoint that is not one, or that tags another vocabulary."""


def to_tensor(image: Image.Image, size: int) -> torch.Tensor:
    """The pixels the tagger sees: RGB, resized (bilinear, antialiased) to ``size`` x ``size``, in [0, 1]."""
    resized = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
    return TF.to_dtype(TF.pil_to_tensor(resized), torch.float32, scale=True)


def _targets(tags: Sequence[Sequence[str]], vocabulary: list[str]) -> torch.Tensor:
    index = {word: i for i, word in enumerate(vocabulary)}
    targets = torch.zeros(len(tags), len(vocabulary))
    for row, words in enumerate(tags):
        targets[row, [index[word] for word in words if word in index]] = 1.0
    return targets


def _network(vocabulary: list[str], settings: TaggerTraining) -> MainModel:
    return build_main_model(BackboneConfig(name="small_cnn", width=settings.width), 3, len(vocabulary))


def train_tagger(images: Sequence[Image.Image], tags: Sequence[Sequence[str]], vocabulary: Sequence[str],
                 settings: TaggerTraining, out: Path, *, progress: bool = False) -> Path:
    """Train a tagger on images with their true tags and write its checkpoint to ``out``."""
    vocabulary = sorted(set(vocabulary))
    torch.manual_seed(settings.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    inputs = torch.stack([to_tensor(image, settings.image_size) for image in images])
    targets = _targets(tags, vocabulary)
    model = _network(vocabulary, settings)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    generator = torch.Generator().manual_seed(settings.seed)
    model.train()
    for _ in progress_bar(range(settings.epochs), desc="training the tagger", unit="epoch", enabled=progress):
        for batch in torch.randperm(len(inputs), generator=generator).split(settings.batch_size):
            loss = F.binary_cross_entropy_with_logits(model(inputs[batch]), targets[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    with atomic_path(out) as tmp:
        torch.save({"vocabulary": vocabulary, "settings": asdict(settings), "state": model.state_dict()}, tmp)
    return out


class TrainedTagger:
    """The :class:`~mavias.core.tagging.base.Tagger` of a checkpoint written by :func:`train_tagger`."""

    def __init__(self, checkpoint: Path, *, vocabulary: Sequence[str] | None = None, threshold: float | None = None):
        state = _read_checkpoint(checkpoint)
        if vocabulary is not None and sorted(set(vocabulary)) != state["vocabulary"]:
            asked, known = set(vocabulary), set(state["vocabulary"])
            lacks, extra = sorted(asked - known), sorted(known - asked)
            raise TaggerCheckpointError(f"the tagger {checkpoint} tags another vocabulary (it lacks {lacks[:5]}, and "
                                        f"has {extra[:5]} besides)",
                                        hint="use the tagger trained for this benchmark, or train one for it")
        self.vocabulary: list[str] = state["vocabulary"]
        try:
            self.settings = TaggerTraining(**state["settings"])
        except TypeError:  # settings of another version of the tagger
            raise TaggerCheckpointError(f"{checkpoint} was written by another version of the tagger training",
                                        hint="train the benchmark's tagger again (mavias data make)") from None
        self.threshold = self.settings.threshold if threshold is None else threshold
        self.model = _network(self.vocabulary, self.settings)
        self.model.load_state_dict(state["state"])
        self.model.eval()
        digest = hashlib.sha256("\n".join(self.vocabulary).encode())
        for name, tensor in sorted(state["state"].items()):
            digest.update(name.encode() + tensor.cpu().numpy().tobytes())
        self._id = f"trained:{digest.hexdigest()[:16]}:t{self.threshold:g}"

    @property
    def tagger_id(self) -> str:
        return self._id

    @property
    def preprocess(self) -> Callable[[Image.Image], torch.Tensor]:
        return lambda image: to_tensor(image, self.settings.image_size)

    @torch.no_grad()
    def probabilities(self, images: torch.Tensor) -> np.ndarray:
        return torch.sigmoid(self.model(images)).numpy()

    def tag(self, batch: TagBatch) -> list[ScoredTags]:
        return [self._kept(row) for row in self.probabilities(batch.images)]

    def tag_images(self, images: Sequence[Image.Image], *, batch_size: int = 256) -> list[ScoredTags]:
        """Tags of images held in memory, in order."""
        tagged: list[ScoredTags] = []
        for start in range(0, len(images), batch_size):
            pixels = torch.stack([self.preprocess(image) for image in images[start:start + batch_size]])
            tagged += [self._kept(row) for row in self.probabilities(pixels)]
        return tagged

    def _kept(self, probabilities: np.ndarray) -> ScoredTags:
        kept = [(self.vocabulary[i], float(p)) for i, p in enumerate(probabilities) if p >= self.threshold]
        return sorted(kept, key=lambda pair: -pair[1])


def _read_checkpoint(path: Path) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except TORCH_LOAD_ERRORS as error:
        raise TaggerCheckpointError(f"{path} cannot be read as a tagger checkpoint ({error})",
                                    hint="pass a file written by the benchmark's tagger training") from None
    if not isinstance(state, dict) or set(CHECKPOINT_KEYS) - set(state):
        raise TaggerCheckpointError(f"{path} is not a tagger checkpoint (it lacks {', '.join(CHECKPOINT_KEYS)})",
                                    hint="pass a file written by the benchmark's tagger training")
    return state


def tag_quality(predicted: Sequence[Sequence[str]], truth: Sequence[Sequence[str]],
                vocabulary: Sequence[str]) -> pd.DataFrame:
    """Per vocabulary word: its support (images truly carrying it), precision, recall and F1 of the predictions."""
    words = sorted(set(vocabulary))
    said, true = _targets(predicted, words).bool().numpy(), _targets(truth, words).bool().numpy()
    hits = (said & true).sum(0)
    rows = []
    for i, word in enumerate(words):
        n_said, n_true = int(said[:, i].sum()), int(true[:, i].sum())
        precision = hits[i] / n_said if n_said else float("nan")
        recall = hits[i] / n_true if n_true else float("nan")
        f1 = 2 * hits[i] / (n_said + n_true) if n_said + n_true else float("nan")
        rows.append({"tag": word, "support": n_true, "precision": precision, "recall": recall, "f1": f1})
    return pd.DataFrame(rows)
