"""Text encoders turn a bias prompt into one embedding vector."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import numpy as np


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
