import numpy as np
import pytest

from mavias.core.encode import TextEncoder, bias_prompt
from mavias.core.encode.base import TokenLimitCounts
from mavias.core.encode.openclip import OpenClipTextEncoder
from mavias.errors import UserError

LONG_TAGS = [f"weathered cobblestone alleyway number {i}" for i in range(60)]


def _normalised(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def test_collective_embeddings_are_unit_vectors_with_an_identifying_id(clip):
    encoder = OpenClipTextEncoder(clip=clip)
    prompts = [bias_prompt(["sea", "dusk"]), bias_prompt([]), bias_prompt(["sea", "dusk"])]

    vectors = encoder.encode(prompts)

    assert isinstance(encoder, TextEncoder)
    assert vectors.shape == (3, encoder.dim) == (3, 384)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(1.0, abs=1e-5)
    assert np.array_equal(vectors[0], vectors[2])
    assert encoder.encoder_id == "open_clip:ViT-S-32:random-init-seed0:collective"
    assert encoder.token_limit == TokenLimitCounts(prompts=3)


def test_a_prompt_over_the_token_limit_is_encoded_in_chunks_and_averaged(clip):
    encoder = OpenClipTextEncoder(clip=clip)
    prompt = bias_prompt(LONG_TAGS)
    assert clip.token_length(prompt) > clip.context_length

    vector = encoder.encode([prompt])[0]

    chunks = encoder.chunk_tags(sorted(LONG_TAGS))
    assert encoder.token_limit == TokenLimitCounts(prompts=1, over_limit=1, chunks=len(chunks), truncated=0)
    assert len(chunks) > 1 and sum(chunks, []) == sorted(LONG_TAGS)
    chunk_prompts = [bias_prompt(chunk) for chunk in chunks]
    assert all(clip.token_length(p) <= clip.context_length for p in chunk_prompts)
    expected = np.average(clip.encode_text(chunk_prompts), axis=0, weights=[len(c) for c in chunks])
    assert vector == pytest.approx(_normalised(expected), abs=1e-5)


def test_a_single_tag_over_the_limit_is_truncated_and_counted(clip):
    encoder = OpenClipTextEncoder(clip=clip)
    encoder.encode([bias_prompt([" ".join(["cobblestone"] * 90)])])
    assert (encoder.token_limit.over_limit, encoder.token_limit.truncated) == (1, 1)


def test_separate_mode_is_the_mean_of_per_tag_embeddings(clip):
    separate = OpenClipTextEncoder(clip=clip, mode="separate")
    collective = OpenClipTextEncoder(clip=clip)
    prompt = bias_prompt(["sea", "dusk", "lighthouse"])

    vector = separate.encode([prompt])[0]

    per_tag = clip.encode_text([bias_prompt([t]) for t in ["dusk", "lighthouse", "sea"]])
    assert vector == pytest.approx(_normalised(per_tag.mean(axis=0)), abs=1e-5)
    assert not np.allclose(vector, collective.encode([prompt])[0], atol=1e-3)
    assert separate.encoder_id.endswith(":separate") and separate.encoder_id != collective.encoder_id
    assert separate.encode([bias_prompt([])])[0] == pytest.approx(collective.encode([bias_prompt([])])[0], abs=1e-6)


def test_unknown_mode_is_rejected(clip):
    with pytest.raises(ValueError, match="collective"):
        OpenClipTextEncoder(clip=clip, mode="jointly")


def test_stored_embeddings_need_no_weights_and_a_new_prompt_names_the_missing_ones(tmp_path):
    """Training on a workspace whose prompts discovery encoded reads them without OpenCLIP's weights (a training node
    without the CLIP checkpoint); only a prompt not stored yet loads the model, and its absence is one error."""
    import pandas as pd

    from mavias.core.encode import EmbeddingStore, bias_embeddings
    from mavias.core.encode.openclip import WeightsNotFoundError

    encoder = OpenClipTextEncoder("ViT-B-32", "openai", weights_dir=str(tmp_path / "no-weights"))
    assert encoder.encoder_id == "open_clip:ViT-B-32:openai:collective" and encoder.dim == 512

    class _Discovery:  # what stored the vectors earlier, under the same id
        encoder_id, dim = encoder.encoder_id, encoder.dim

        def encode(self, prompts: list[str]) -> np.ndarray:
            return np.eye(len(prompts), self.dim, dtype=np.float32)

    labels, tags = pd.Series(["boat", "car"]), pd.Series([["water"], ["road"]])
    relevance = pd.DataFrame({"class": ["boat", "car"], "tag": ["water", "road"], "relevant": [False, False],
                              "source": ["judge", "judge"]})
    store = EmbeddingStore(tmp_path / "store")
    store.ensure(_Discovery(), [bias_prompt(["water"]), bias_prompt(["road"])])
    embedded = bias_embeddings(labels, tags, relevance, encoder, store)
    assert embedded.encoded == 0 and embedded.vectors.shape == (2, 512) and encoder._clip is None
    with pytest.raises(WeightsNotFoundError, match="--allow-download"):
        encoder.encode([bias_prompt(["sky"])])


def test_an_unknown_pretrained_tag_is_named_before_anything_is_encoded():
    with pytest.raises(UserError, match="'no-such-tag' is neither a file nor a pretrained tag of ViT-B-32"):
        OpenClipTextEncoder("ViT-B-32", "no-such-tag")
