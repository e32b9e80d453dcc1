import numpy as np
import pytest

from mavias.core.encode import EmbeddingStore, SentenceTransformerEncoder, bias_prompt


class CountingEncoder:
    """A deterministic encoder that records what it was asked to encode."""

    encoder_id = "counting:v1"
    dim = 4

    def __init__(self):
        self.calls: list[str] = []

    def encode(self, prompts: list[str]) -> np.ndarray:
        self.calls += prompts
        return np.array([[len(p), p.count(","), 1.0, 0.0] for p in prompts], dtype=np.float32)


def test_prompt_is_sorted_and_deduplicated():
    assert bias_prompt(["sky", "grass", "sky", " "]) == "a photo of grass, sky"
    assert bias_prompt(["grass", "sky"]) == bias_prompt(["sky", "grass"])
    assert bias_prompt([]) == "a photo"


def test_each_unique_prompt_is_encoded_once_ever(tmp_path):
    encoder = CountingEncoder()
    store = EmbeddingStore(tmp_path)
    prompts = [bias_prompt(t) for t in (["sky"], ["sky", "grass"], ["grass", "sky"], ["sky"])]
    assert store.ensure(encoder, prompts) == 2
    assert EmbeddingStore(tmp_path).ensure(encoder, prompts + ["a photo"]) == 1  # reopened from disk
    assert sorted(encoder.calls) == ["a photo", "a photo of grass, sky", "a photo of sky"]
    vectors = EmbeddingStore(tmp_path).lookup(encoder.encoder_id, prompts)
    assert vectors.dtype == np.float32 and vectors.shape == (4, 4)
    assert np.array_equal(vectors[1], vectors[2]) and np.array_equal(vectors[0], vectors[3])
    assert np.load(tmp_path / "embeddings.npy").dtype == np.float16


def test_lookup_of_unknown_prompts_fails_clearly(tmp_path):
    with pytest.raises(KeyError, match="not encoded yet"):
        EmbeddingStore(tmp_path).lookup("counting:v1", ["a photo of sky"])


def test_shipped_minilm_encoder_works_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    encoder = SentenceTransformerEncoder()
    vectors = encoder.encode(["a photo of street, traffic light", "a photo of forest, mushroom", "a photo of road"])
    assert vectors.shape == (3, encoder.dim) and encoder.dim == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # real weights: related scenes are closer than unrelated ones
    assert vectors[0] @ vectors[2] > vectors[0] @ vectors[1]
