"""On-disk embedding store: each unique prompt is encoded once per encoder, ever.

Append-only: each write adds one part, ``part-<time>-<id>.npy`` (float16, n x d) then ``part-<time>-<id>.parquet``
(key, prompt), so a write costs what it adds, never a rewrite of what is stored, and two writers never clobber each
other; a part without its index (a write cut off) is ignored. ``meta.json`` names the encoders (updated under a
file lock). A store written as
one ``embeddings.npy`` + ``index.parquet`` is read as its first part.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
from filelock import FileLock

from mavias.core.encode.base import TextEncoder
from mavias.utils.atomic import atomic_path, write_json

LEGACY_PART = ("embeddings.npy", "index.parquet")


def embedding_key(encoder_id: str, prompt: str) -> str:
    return hashlib.sha256(f"{encoder_id}\n{prompt}".encode()).hexdigest()[:32]


def _parts(root: Path) -> list[tuple[Path, Path]]:
    """(vectors, index) of every complete part, oldest first."""
    legacy = [(root / LEGACY_PART[0], root / LEGACY_PART[1])] if (root / LEGACY_PART[1]).exists() else []
    return legacy + [(index.with_suffix(".npy"), index) for index in sorted(root.glob("part-*.parquet"))]


class EmbeddingStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._index, self._matrix = self._load()

    def _load(self) -> tuple[pd.DataFrame, np.ndarray | None]:
        indexes, matrices = [], []
        for vectors, index in _parts(self.root):
            indexes.append(pd.read_parquet(index, columns=["key", "prompt"]))
            matrices.append(np.load(vectors))
        if not indexes:
            empty = pd.DataFrame({"key": pd.Series(dtype=str), "prompt": pd.Series(dtype=str)})
            return empty.assign(row=pd.Series(dtype="int64")), None
        index = pd.concat(indexes, ignore_index=True)
        return index.assign(row=range(len(index))).drop_duplicates("key"), np.concatenate(matrices)

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
        rows = pd.DataFrame({"key": [embedding_key(encoder.encoder_id, p) for p in todo], "prompt": todo})
        self._append(new, rows)
        start = 0 if self._matrix is None else len(self._matrix)
        self._matrix = new if self._matrix is None else np.concatenate([self._matrix, new])
        self._index = pd.concat([self._index, rows.assign(row=range(start, start + len(todo)))], ignore_index=True)
        return len(todo)

    def _append(self, vectors: np.ndarray, rows: pd.DataFrame) -> None:
        # vectors first: an index never points at vectors that are not there, even if the process dies in between
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        with atomic_path(self.root / f"{name}.npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, vectors)
        with atomic_path(self.root / f"{name}.parquet") as tmp:
            rows.to_parquet(tmp, index=False)

    def _check_encoder(self, encoder: TextEncoder) -> None:
        meta_path = self.root / "meta.json"
        with FileLock(self.root / "meta.json.lock"):  # read-modify-write: a second writer waits
            self._record_encoder(meta_path, encoder)

    def _record_encoder(self, meta_path: Path, encoder: TextEncoder) -> None:
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

    def lookup(self, encoder_id: str, prompts: list[str]) -> np.ndarray:
        """float32 matrix of the prompts' embeddings, in order; every prompt must be stored."""
        rows = self._index.set_index("key")["row"]
        keys = [embedding_key(encoder_id, p) for p in prompts]
        missing = [p for p, k in zip(prompts, keys) if k not in rows.index]
        if missing:
            raise KeyError(f"{len(missing)} prompt(s) not encoded yet, e.g. {missing[:2]}; call ensure() first")
        return self._matrix[rows.loc[keys].to_numpy()].astype(np.float32)
