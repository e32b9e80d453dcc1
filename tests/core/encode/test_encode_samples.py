import re

import pandas as pd
from typer.testing import CliRunner

from mavias.cli.encode import app
from mavias.core.discovery import Workspace
from mavias.core.encode import EmbeddingStore, bias_embeddings, bias_prompt
from mavias.core.encode.openclip import OpenClipTextEncoder
from mavias.core.manifest import save_manifest
from mavias.core.relevance import save_relevance


class CountingEncoder:
    def __init__(self, inner):
        self.inner = inner
        self.encoded: list[str] = []

    encoder_id = property(lambda self: self.inner.encoder_id)
    dim = property(lambda self: self.inner.dim)

    def encode(self, prompts):
        self.encoded += prompts
        return self.inner.encode(prompts)


DECISIONS = pd.DataFrame([("boat", "hull", True), ("boat", "sail", True), ("boat", "sea", False),
                          ("boat", "dusk", False), ("boat", "street", False), ("boat", "road", False)],
                         columns=["class", "tag", "relevant"]).assign(source="test")


def test_each_distinct_tag_set_is_encoded_once_ever(clip, tmp_path):
    encoder = CountingEncoder(OpenClipTextEncoder(clip=clip))
    store = EmbeddingStore(tmp_path)
    tags = pd.Series([["sea", "dusk", "hull"], ["dusk", "sea", "sea"], ["sail"], ["street"], []])

    embedded = bias_embeddings(pd.Series(["boat"] * 5), tags, DECISIONS, encoder, store)

    assert embedded.encoded == 3 and len(store) == 3 and embedded.distinct_prompts == 3
    assert sorted(encoder.encoded) == ["a photo", "a photo of dusk, sea", "a photo of street"]
    assert embedded.irrelevant_tags.tolist() == [["dusk", "sea"], ["dusk", "sea"], [], ["street"], []]
    assert embedded.vectors.shape == (5, encoder.dim) and (embedded.vectors[0] == embedded.vectors[1]).all()

    more = bias_embeddings(pd.Series(["boat", "boat"]), pd.Series([["sea", "dusk"], ["road"]]), DECISIONS, encoder,
                           EmbeddingStore(tmp_path))
    assert more.encoded == 1 and encoder.encoded[3:] == ["a photo of road"]
    stored = EmbeddingStore(tmp_path).lookup(encoder.encoder_id, [bias_prompt(["sea", "dusk"])])
    assert (stored[0] == more.vectors[0]).all()


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
        "--workspace", str(tmp_path / "ws"), "--encoder", "openclip:ViT-S-32/none", "--device", "cpu",
    ]  # fmt: skip

    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, args)

    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert (_encoded(first.output), _encoded(second.output)) == (3, 0)
    encoder_id = "open_clip:ViT-S-32:random-init-seed0:collective"
    prompts = ["a photo of sea", "a photo of dusk, sea", "a photo of street"]
    store = EmbeddingStore(Workspace(tmp_path / "ws").embeddings(encoder_id))
    assert len(store) == 3 and store.lookup(encoder_id, prompts).shape == (3, 384)


def _encoded(output: str) -> int:
    return int(re.search(r"prompts encoded\W+(\d+)", output).group(1))
