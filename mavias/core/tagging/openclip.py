"""OpenCLIP zero-shot tagger: image embeddings against the embeddings of "a photo of a {tag}" over a vocabulary.

Calibrated score: the softmax over the whole vocabulary of the image-text logits, with the model's own learned
temperature (``logit_scale``), i.e. the probability the model puts on the tag as the description of the image.
A tag is kept when its probability is at least ``threshold`` times the uniform baseline 1/|vocabulary| (so one
threshold means the same for vocabularies of any size), and at most ``top_k`` tags are kept per image.
The stored score is that probability.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mavias.core.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.core.encode.openclip import OpenClip
from mavias.core.tagging.base import ScoredTags, TagBatch
from mavias.core.tagging.defaults import TAG_THRESHOLD, TAG_TOP_K
from mavias.core.tagging.vocabulary import VocabularyError
from mavias.utils.atomic import atomic_path

TAG_PROMPT = "a photo of a {}"


def default_cache_dir() -> Path:
    return Path(os.environ.get("MAVIAS_CACHE_DIR", Path.home() / ".cache" / "mavias"))


def vocabulary_digest(vocabulary: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(vocabulary).encode()).hexdigest()[:16]


class OpenClipTagger:
    def __init__(
        self,
        model: str = OPENCLIP_MODEL,
        pretrained: str | None = OPENCLIP_PRETRAINED,
        *,
        vocabulary: Sequence[str] | None = None,
        threshold: float = TAG_THRESHOLD,
        top_k: int = TAG_TOP_K,
        device: str = "auto",
        cache_dir: str | Path | None = None,
        weights_dir: str | None = None,
        allow_download: bool = False,
        clip: OpenClip | None = None,
    ):
        if vocabulary is None:
            from mavias.core.tagging.vocabulary import load_vocabulary

            vocabulary = load_vocabulary()
        self.vocabulary = sorted({t.strip().lower() for t in vocabulary if t.strip()})
        if not self.vocabulary:
            raise VocabularyError("the tag vocabulary is empty: give --vocabulary a file with one tag per line")
        self.threshold = threshold
        self.top_k = top_k
        self.clip = clip or OpenClip(
            model, pretrained, device=device, weights_dir=weights_dir, allow_download=allow_download
        )
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._vocab_embeddings = torch.from_numpy(self._load_vocab_embeddings()).to(self.clip.device)

    @property
    def tagger_id(self) -> str:
        return (
            f"{self.clip.model_id}:vocab-{vocabulary_digest(self.vocabulary)}"
            f":threshold-{self.threshold:g}:top-{self.top_k}"
        )

    @property
    def random_weights(self) -> bool:
        """Tags of an untrained model are noise (:func:`mavias.core.tagging.base.tagging_warnings`)."""
        return self.clip.random_weights

    @property
    def preprocess(self) -> Callable[[Image.Image], torch.Tensor]:
        return self.clip.preprocess

    @property
    def vocab_cache_path(self) -> Path:
        key = f"{self.clip.model_id}\n{TAG_PROMPT}\n{vocabulary_digest(self.vocabulary)}"
        return self.cache_dir / "vocab-embeddings" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.npy"

    def _load_vocab_embeddings(self) -> np.ndarray:
        """Text embeddings of the vocabulary, computed once per (model, weights, vocabulary) and cached on disk."""
        path = self.vocab_cache_path
        if path.exists():
            return np.load(path)
        vectors = self.clip.encode_text([TAG_PROMPT.format(t) for t in self.vocabulary],
                                        progress=f"embedding the {len(self.vocabulary)}-tag vocabulary (once)")
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, vectors)
        return vectors

    @torch.inference_mode()
    def probabilities(self, images: torch.Tensor) -> torch.Tensor:
        """(batch, |vocabulary|) softmax over the vocabulary at the model's temperature."""
        features = self.clip.encode_images(images)
        logits = self.clip.model.logit_scale.exp().float() * features @ self._vocab_embeddings.T
        return logits.softmax(dim=-1)

    def tag(self, batch: TagBatch) -> list[ScoredTags]:
        return self.select(self.probabilities(batch.images))

    def select(self, probs: torch.Tensor) -> list[ScoredTags]:
        """The top-k tags per row whose probability clears the threshold, highest first."""
        top = probs.topk(min(self.top_k, probs.shape[1]), dim=-1)
        floor = self.threshold / len(self.vocabulary)
        return [
            [(self.vocabulary[i], p) for p, i in zip(values.tolist(), indices.tolist()) if p >= floor]
            for values, indices in zip(top.values.cpu(), top.indices.cpu())
        ]
