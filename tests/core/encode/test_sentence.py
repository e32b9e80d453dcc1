"""The offline sentence encoder: one MiniLM per process, whoever asks (the judge, the bias embeddings)."""

from __future__ import annotations

import numpy as np

from mavias.core.encode.sentence import SentenceTransformerEncoder


def test_encoders_of_one_model_share_its_weights_and_agree(minilm_encoder):
    other = SentenceTransformerEncoder(batch_size=2)
    assert other._model is minilm_encoder._model
    prompts = ["a photo of sea, wave", "a photo of road", "a photo of forest, tree, foliage"]
    np.testing.assert_allclose(other.encode(prompts), minilm_encoder.encode(prompts), atol=1e-5)
