"""Text encoders turn a bias prompt into one embedding vector."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class TokenLimitCounts:
    """How often prompts hit the text encoder's context window (77 tokens for CLIP, 256 word pieces for MiniLM)."""

    prompts: int = 0  # prompts encoded
    over_limit: int = 0  # prompts longer than the window: encoded as chunks of tags, averaged
    chunks: int = 0  # chunk prompts made for them
    truncated: int = 0  # texts the tokenizer cuts: CLIP's still too long (one very long tag, free text), MiniLM's all


@runtime_checkable
class TextEncoder(Protocol):
    """Anything that maps prompts to a float32 matrix of shape (n, dim)."""

    @property
    def encoder_id(self) -> str:
        """Identifies model and weights; part of every cache key, so two encoders never share embeddings."""

    @property
    def dim(self) -> int: ...

    def encode(self, prompts: list[str]) -> np.ndarray: ...


def bias_prompt(tags: Iterable[str]) -> str:
    """The paper's prompt "a photo of t1, ..., tk" over the sorted, deduplicated tags ("collectively")."""
    unique = sorted({t.strip() for t in tags if t and t.strip()})
    return "a photo of " + ", ".join(unique) if unique else "a photo"
