"""Bias embeddings: irrelevant tags -> "a photo of t1, ..., tk" -> text encoder -> stored vector.

The OpenCLIP text encoder (optional dependency open_clip_torch) lives in ``mavias.encode.openclip``.
"""

from mavias.encode.base import TextEncoder, bias_prompt
from mavias.encode.samples import encode_samples, save_sample_embeddings
from mavias.encode.sentence import DEFAULT_MODEL, SentenceTransformerEncoder
from mavias.encode.store import EmbeddingStore, embedding_key

__all__ = [
    "DEFAULT_MODEL",
    "EmbeddingStore",
    "SentenceTransformerEncoder",
    "TextEncoder",
    "bias_prompt",
    "embedding_key",
    "encode_samples",
    "save_sample_embeddings",
]
