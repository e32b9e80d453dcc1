"""Per-sample bias embeddings: each sample points at the stored embedding of its irrelevant-tag prompt."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from mavias.encode.base import TextEncoder, bias_prompt
from mavias.encode.store import EmbeddingStore, embedding_key
from mavias.utils.atomic import atomic_path

SAMPLE_EMBEDDING_COLUMNS = ["sample_id", "key"]


def encode_samples(
    sample_ids: Sequence[str], irrelevant_tags: pd.Series, encoder: TextEncoder, store: EmbeddingStore
) -> tuple[pd.DataFrame, int]:
    """Encode every distinct prompt not stored yet; return (sample_id, key) rows and how many prompts were encoded."""
    prompts = [bias_prompt(tags) for tags in irrelevant_tags]
    n_encoded = store.ensure(encoder, sorted(set(prompts)))
    keys = [embedding_key(encoder.encoder_id, p) for p in prompts]
    return pd.DataFrame({"sample_id": list(sample_ids), "key": keys}, columns=SAMPLE_EMBEDDING_COLUMNS), n_encoded


def save_sample_embeddings(df: pd.DataFrame, path: str | Path) -> Path:
    with atomic_path(path) as tmp:
        df[SAMPLE_EMBEDDING_COLUMNS].to_parquet(tmp, index=False)
    return Path(path)
