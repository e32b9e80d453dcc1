"""The one path from an image's tags to its bias embedding, shared by discovery (which pays for the encoding) and
training (which finds every prompt stored): irrelevant tags (B_i = T_i minus the tags relevant to y_i) -> the prompt
"a photo of t1, ..., tk" -> the text encoder, through the embedding store (each distinct prompt encoded once, ever).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mavias.core.encode.base import TextEncoder, bias_prompt
from mavias.core.encode.store import EmbeddingStore
from mavias.core.relevance import irrelevant_tags


@dataclass
class BiasEmbeddings:
    irrelevant_tags: pd.Series  # per sample, sorted
    prompts: list[str]  # per sample
    vectors: np.ndarray  # float32, one row per sample
    encoded: int  # prompts new to the store, sent to the encoder

    @property
    def distinct_prompts(self) -> int:
        return len(set(self.prompts))


def bias_embeddings(labels: pd.Series, sample_tags: pd.Series, relevance: pd.DataFrame, encoder: TextEncoder,
                    store: EmbeddingStore, *, keep_class_names: bool = False) -> BiasEmbeddings:
    """Every sample's bias embedding, in order; prompts not stored yet are encoded and stored first
    (``keep_class_names``: :func:`~mavias.core.relevance.irrelevant_tags`)."""
    irrelevant = irrelevant_tags(labels, sample_tags, relevance, keep_class_names=keep_class_names)
    prompts = [bias_prompt(tags) for tags in irrelevant]
    encoded = store.ensure(encoder, prompts)
    vectors = store.lookup(encoder.encoder_id, prompts) if prompts else np.zeros((0, encoder.dim), np.float32)
    return BiasEmbeddings(irrelevant, prompts, vectors, encoded)
