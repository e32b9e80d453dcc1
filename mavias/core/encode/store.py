"""On-disk embedding store: each unique prompt is encoded once per encoder, ever.

Layout: ``embeddings.npy`` (float16, n x d), ``index.parquet`` (key, row, prompt), ``meta.json``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from mavias.core.encode.base import TextEncoder
from mavias.utils.atomic import atomic_path, write_json


def embedding_key(encoder_id: str, prompt: str) -> str:
    return hashlib.sha256(f"{encoder_id}\n{prompt}".encode()).hexdigest()[:32]


class EmbeddingStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._index = self._load_index()
        self._matrix = self._load_matrix()

    def _load_index(self) -> pd.DataFrame:
        path = self.root / "index.parquet"
        if path.exists():
            return pd.read_parquet(path)
        return pd.DataFrame({"key": pd.Series(dtype=str), "row": pd.Series(dtype="int64"), "prompt": pd.Series(dtype=str)})

    def _load_matrix(self) -> np.ndarray | None:
        path = self.root / "embeddings.npy"
        return np.load(path) if path.exists() else None

    def __len__(self) -> int:
        return len(self._index)

    def ensure(self, encoder: TextEncoder, prompts: list[str], *, batch_size: int = 512) -> int:
        """Encode the prompts not stored yet; returns how many were encoded."""
        known = set(self._index["key"])
        todo = sorted({p for p in prompts if embedding_key(encoder.encoder_id, p) not in known})
        if not todo:
            return 0
        self._check_encoder(encoder)
        chunks = [encoder.encode(todo[i : i + batch_size]) for i in range(0, len(todo), batch_size)]
        new = np.concatenate(chunks).astype(np.float16)
        start = 0 if self._matrix is None else len(self._matrix)
        self._matrix = new if self._matrix is None else np.concatenate([self._matrix, new])
        rows = pd.DataFrame(
            {"key": [embedding_key(encoder.encoder_id, p) for p in todo], "row": range(start, start + len(todo)), "prompt": todo}
        )
        self._index = pd.concat([self._index, rows], ignore_index=True)
        self._save()
        return len(todo)

    def _check_encoder(self, encoder: TextEncoder) -> None:
        meta_path = self.root / "meta.json"
        if meta_path.exists():
            meta = json.loads(meta_path.read_text())
            if meta["dim"] != encoder.dim:
                raise ValueError(
                    f"embedding store {self.root} holds {meta['dim']}-d vectors from {meta['encoder_ids']}; "
                    f"{encoder.encoder_id} gives {encoder.dim}-d: use a separate store per encoder dimension"
                )
            ids = sorted(set(meta["encoder_ids"]) | {encoder.encoder_id})
        else:
            ids = [encoder.encoder_id]
        write_json(meta_path, {"dim": encoder.dim, "encoder_ids": ids})

    def _save(self) -> None:
        # matrix first: an index row never points past the matrix, even if the process dies in between
        with atomic_path(self.root / "embeddings.npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, self._matrix)
        with atomic_path(self.root / "index.parquet") as tmp:
            self._index.to_parquet(tmp, index=False)

    def lookup(self, encoder_id: str, prompts: list[str]) -> np.ndarray:
        """float32 matrix of the prompts' embeddings, in order; every prompt must be stored."""
        rows = self._index.set_index("key")["row"]
        keys = [embedding_key(encoder_id, p) for p in prompts]
        missing = [p for p, k in zip(prompts, keys) if k not in rows.index]
        if missing:
            raise KeyError(f"{len(missing)} prompt(s) not encoded yet, e.g. {missing[:2]}; call ensure() first")
        return self._matrix[rows.loc[keys].to_numpy()].astype(np.float32)
