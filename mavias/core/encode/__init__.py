"""Bias embeddings: irrelevant tags -> "a photo of t1, ..., tk" -> text encoder -> stored vector
(:func:`~mavias.core.encode.bias.bias_embeddings`, the one path discovery and training share).

The OpenCLIP text encoder (optional dependency open_clip_torch) lives in ``mavias.core.encode.openclip``.
"""

from mavias.core.encode.base import TextEncoder, bias_prompt
from mavias.core.encode.bias import BiasEmbeddings, bias_embeddings
from mavias.core.encode.factory import MINILM, make_encoder, parse_encoder_spec
from mavias.core.encode.sentence import DEFAULT_MODEL, SentenceTransformerEncoder
from mavias.core.encode.store import EmbeddingStore, embedding_key

__all__ = [
    "DEFAULT_MODEL",
    "MINILM",
    "BiasEmbeddings",
    "EmbeddingStore",
    "SentenceTransformerEncoder",
    "TextEncoder",
    "bias_embeddings",
    "bias_prompt",
    "embedding_key",
    "make_encoder",
    "parse_encoder_spec",
]
