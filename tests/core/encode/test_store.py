import json
import threading

import numpy as np
import pandas as pd
import pytest
from filelock import FileLock

from mavias.core.encode import EmbeddingStore, SentenceTransformerEncoder, bias_prompt
from mavias.core.encode.store import embedding_key


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
    assert {np.load(part).dtype for part in tmp_path.glob("part-*.npy")} == {np.dtype(np.float16)}


def test_a_write_appends_a_part_and_never_rewrites_what_is_stored(tmp_path):
    encoder = CountingEncoder()
    EmbeddingStore(tmp_path).ensure(encoder, ["a photo of sky"])
    first = {path.name: path.read_bytes() for path in tmp_path.glob("part-*")}
    (tmp_path / "part-99999999999999999999-cutoff.npy").write_bytes(b"a write cut off before its index")
    EmbeddingStore(tmp_path).ensure(encoder, ["a photo of sky", "a photo of grass"])
    assert all((tmp_path / name).read_bytes() == data for name, data in first.items())
    assert len(list(tmp_path.glob("part-*.parquet"))) == 2 and encoder.calls == ["a photo of sky", "a photo of grass"]
    reopened = EmbeddingStore(tmp_path)
    assert len(reopened) == 2 and reopened.lookup(encoder.encoder_id, ["a photo of grass"])[0, 0] == 16


def test_a_store_written_as_one_matrix_is_read_as_its_first_part(tmp_path):
    encoder = CountingEncoder()
    np.save(tmp_path / "embeddings.npy", np.array([[7, 0, 1, 0]], dtype=np.float16))
    key = embedding_key(encoder.encoder_id, "a photo of sky")
    pd.DataFrame({"key": [key], "row": [0], "prompt": ["a photo of sky"]}).to_parquet(tmp_path / "index.parquet")
    store = EmbeddingStore(tmp_path)
    assert store.ensure(encoder, ["a photo of sky", "a photo of grass"]) == 1 and encoder.calls == ["a photo of grass"]
    assert EmbeddingStore(tmp_path).lookup(encoder.encoder_id, ["a photo of sky"])[0, 0] == 7


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


def test_a_second_writer_of_the_encoder_list_waits_for_the_first(tmp_path):
    store = EmbeddingStore(tmp_path / "store")
    store.ensure(CountingEncoder(), ["a photo of sky"])
    other = CountingEncoder()
    other.encoder_id = "counting:v2"
    with FileLock(store.root / "meta.json.lock"):  # a writer in another process holds it
        writer = threading.Thread(target=store.ensure, args=(other, ["a photo of sea"]))
        writer.start()
        writer.join(timeout=1.0)
        assert writer.is_alive()  # waiting, not writing over the first writer's list
    writer.join(timeout=10)
    assert json.loads((store.root / "meta.json").read_text())["encoder_ids"] == ["counting:v1", "counting:v2"]
