"""Sampling helpers shared by the benchmarks."""

from __future__ import annotations

import numpy as np


def exact_flags(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` booleans in random order, exactly ``round(rate * n)`` of them true."""
    return rng.permutation(np.arange(n) < round(rate * n))


def stratified_flags(labels: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Booleans with an exact ``rate`` of trues within every label, so the rate holds per class too."""
    flags = np.zeros(len(labels), dtype=bool)
    for value in np.unique(labels):
        rows = np.flatnonzero(labels == value)
        flags[rows] = exact_flags(len(rows), rate, rng)
    return flags


def balanced_labels(n: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` class indices in random order, class sizes differing by at most one."""
    return rng.permutation(np.arange(n) % n_classes)
