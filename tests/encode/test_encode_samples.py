import re

import pandas as pd
from typer.testing import CliRunner

from mavias.cli.encode import app
from mavias.encode import EmbeddingStore, bias_prompt, embedding_key
from mavias.encode.openclip import OpenClipTextEncoder
from mavias.encode.samples import encode_samples
from mavias.manifest import save_manifest
from mavias.relevance import save_relevance


class CountingEncoder:
    def __init__(self, inner):
        self.inner = inner
        self.encoded: list[str] = []

    encoder_id = property(lambda self: self.inner.encoder_id)
    dim = property(lambda self: self.inner.dim)

    def encode(self, prompts):
        self.encoded += prompts
        return self.inner.encode(prompts)


def test_each_distinct_tag_set_is_encoded_once_ever(clip, tmp_path):
    encoder = CountingEncoder(OpenClipTextEncoder(clip=clip))
    store = EmbeddingStore(tmp_path)
    tags = pd.Series([["sea", "dusk"], ["dusk", "sea", "sea"], [], ["street"], []])

    keys, n_encoded = encode_samples(list("abcde"), tags, encoder, store)

    assert n_encoded == 3 and len(store) == 3
    assert sorted(encoder.encoded) == ["a photo", "a photo of dusk, sea", "a photo of street"]
    assert keys["key"].tolist()[:2] == [embedding_key(encoder.encoder_id, "a photo of dusk, sea")] * 2
    assert keys["sample_id"].tolist() == list("abcde")

    more, n_more = encode_samples(["f", "g"], pd.Series([["sea", "dusk"], ["road"]]), encoder, EmbeddingStore(tmp_path))
    assert n_more == 1 and encoder.encoded[3:] == ["a photo of road"]
    stored = EmbeddingStore(tmp_path).lookup(encoder.encoder_id, [bias_prompt(["sea", "dusk"])])
    assert stored.shape == (1, 384)


def test_cli_encodes_irrelevant_tags_of_a_manifest(tmp_path):
    manifest = pd.DataFrame(
        {
            "sample_id": ["s1", "s2", "s3"],
            "uri": ["a.png", "b.png", "c.png"],
            "label": ["boat", "boat", "car"],
            "split": "train",
            "tags": [["hull", "sea"], ["sea", "sail", "dusk"], ["wheel", "street"]],
        }
    )
    save_manifest(manifest, tmp_path / "manifest.parquet")
    decisions = [("boat", "hull", True), ("boat", "sail", True), ("boat", "sea", False), ("boat", "dusk", False),
                 ("car", "wheel", True), ("car", "street", False)]  # fmt: skip
    relevance = pd.DataFrame(decisions, columns=["class", "tag", "relevant"]).assign(source="test")
    save_relevance(relevance, tmp_path / "r.parquet")
    args = [
        "--manifest", str(tmp_path / "manifest.parquet"), "--relevance", str(tmp_path / "r.parquet"),
        "--store", str(tmp_path / "store"), "--out", str(tmp_path / "keys.parquet"),
        "--encoder", "openclip", "--encoder-model", "ViT-S-32", "--pretrained", "none", "--device", "cpu",
    ]  # fmt: skip

    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, args)

    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert (_encoded(first.output), _encoded(second.output)) == (3, 0)
    encoder_id = "open_clip:ViT-S-32:random-init-seed0:collective"
    prompts = ["a photo of sea", "a photo of dusk, sea", "a photo of street"]
    keys = pd.read_parquet(tmp_path / "keys.parquet")
    assert keys["key"].tolist() == [embedding_key(encoder_id, p) for p in prompts]
    assert len(EmbeddingStore(tmp_path / "store")) == 3


def _encoded(output: str) -> int:
    return int(re.search(r"prompts encoded\W+(\d+)", output).group(1))
