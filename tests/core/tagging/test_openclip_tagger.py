import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import open_clip
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets import import_imagefolder, write_import
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.encode.defaults import OPENCLIP_MODEL
from mavias.core.encode.openclip import OpenClip, WeightsNotFoundError
from mavias.core.tagging.base import TagBatch
from mavias.core.tagging.openclip import OpenClipTagger
from mavias.errors import UserError

REPO = Path(__file__).resolve().parents[3]


def _batch(clip, scenes, manifest_dir, n=3) -> TagBatch:
    rows = scenes.head(n)
    images = torch.stack([clip.preprocess(Image.open(manifest_dir / uri).convert("RGB")) for uri in rows["uri"]])
    return TagBatch(rows, images)


def test_tags_are_top_k_vocabulary_words_by_probability(clip, scenes, scenes_manifest, vocabulary, vocab_cache):
    tagger = OpenClipTagger(clip=clip, vocabulary=vocabulary, threshold=0.0, top_k=5, cache_dir=vocab_cache)
    batch = _batch(clip, scenes, scenes_manifest.parent)

    tagged = tagger.tag(batch)
    probs = tagger.probabilities(batch.images)

    assert probs.shape == (3, len(vocabulary))
    assert torch.allclose(probs.sum(dim=1), torch.ones(3))
    assert [len(tags) for tags in tagged] == [5, 5, 5]
    for row, tags in zip(probs, tagged):
        scores = [score for _, score in tags]
        assert scores == sorted(scores, reverse=True)
        assert scores == pytest.approx(row.topk(5).values.tolist())
        assert {tag for tag, _ in tags} <= set(vocabulary)


def test_threshold_is_relative_to_the_uniform_probability(clip, vocabulary, vocab_cache):
    capped = OpenClipTagger(clip=clip, vocabulary=vocabulary, threshold=1.0, top_k=100, cache_dir=vocab_cache)
    top_two = OpenClipTagger(clip=clip, vocabulary=vocabulary, threshold=1.0, top_k=2, cache_dir=vocab_cache)
    above_one = len(vocabulary) + 1.0  # a probability above 1
    impossible = OpenClipTagger(clip=clip, vocabulary=vocabulary, threshold=above_one, cache_dir=vocab_cache)
    uniform = 1.0 / len(vocabulary)
    probs = torch.tensor([[3 * uniform, 2 * uniform, 1.5 * uniform] + [0.0] * (len(vocabulary) - 4) + [uniform]])

    assert [score / uniform for _, score in capped.select(probs)[0]] == pytest.approx([3, 2, 1.5, 1])
    assert [tag for tag, _ in top_two.select(probs)[0]] == top_two.vocabulary[:2]
    assert impossible.select(probs) == [[]]
    assert len({capped.tagger_id, top_two.tagger_id, impossible.tagger_id}) == 3


def test_vocabulary_embeddings_are_cached_per_model_and_vocabulary(clip, vocabulary, vocab_cache, monkeypatch):
    first = OpenClipTagger(clip=clip, vocabulary=vocabulary, cache_dir=vocab_cache)
    assert first.vocab_cache_path.exists()

    def no_text_encoding(texts, **_):
        raise AssertionError(f"vocabulary encoded again: {texts[:3]}")

    monkeypatch.setattr(clip, "encode_text", no_text_encoding)
    again = OpenClipTagger(clip=clip, vocabulary=list(reversed(vocabulary)), cache_dir=vocab_cache)
    assert again.vocab_cache_path == first.vocab_cache_path
    with pytest.raises(AssertionError, match="vocabulary encoded again"):
        OpenClipTagger(clip=clip, vocabulary=[*vocabulary, "zebra"], cache_dir=vocab_cache)


def test_local_checkpoint_file_loads_the_same_model(clip, tmp_path):
    checkpoint = tmp_path / "tiny.pt"
    torch.save(clip.model.state_dict(), checkpoint)

    loaded = OpenClip(clip.model_name, str(checkpoint), device="cpu", seed=1)

    assert loaded.weights_id.startswith("file-")
    assert (loaded.encode_text(["a photo of a dog"]) == pytest.approx(clip.encode_text(["a photo of a dog"]), abs=1e-5))


def test_a_checkpoint_that_is_not_one_or_of_another_model_is_named(clip, tmp_path):
    (tmp_path / "random.pt").write_bytes(b"\x8c not a pickle" * 50)
    with pytest.raises(UserError, match=r"random.pt cannot be loaded as .* weights \(UnpicklingError: not a checkpoint"):
        OpenClip(clip.model_name, str(tmp_path / "random.pt"), device="cpu")
    torch.save({"visual.proj": torch.zeros(3, 3)}, tmp_path / "other.pt")
    with pytest.raises(UserError, match=r"other.pt cannot be loaded as .* weights \(RuntimeError: "):
        OpenClip(clip.model_name, str(tmp_path / "other.pt"), device="cpu")


def test_missing_weights_fail_offline_with_instructions(tmp_path):
    with pytest.raises(WeightsNotFoundError, match="--pretrained /path/to/checkpoint") as err:
        OpenClip("ViT-B-32", "openai", weights_dir=str(tmp_path))
    assert "--allow-download" in str(err.value)
    with pytest.raises(WeightsNotFoundError, match="laion2b_s34b_b79k"):
        OpenClip("ViT-B-32", "no-such-tag", weights_dir=str(tmp_path))


def test_default_architecture_builds():
    with torch.device("meta"):  # the paper's ViT-L-14 without allocating its 1.7 GB of weights
        model = open_clip.create_model(OPENCLIP_MODEL, device="meta")
    assert model.text_projection.shape == (768, 768)
    assert sum(p.numel() for p in model.parameters()) > 400e6


class _NotFound(BaseHTTPRequestHandler):
    asked: list[str] = []

    def do_HEAD(self):  # noqa: N802 - http.server's name
        self.asked.append(self.path)
        self.send_response(404)
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, *args):
        pass


def test_a_failed_download_is_one_line_with_the_other_ways(photos_partition, tmp_path):
    """`--allow-download` where the hub cannot serve the weights (a local hub that answers 404 to everything)."""
    hub = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_port}", "HF_HOME": str(tmp_path / "hf"),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run([sys.executable, "-m", "mavias.cli", "discover", "--partition", str(photos_partition),
                                 "--workspace", str(tmp_path / "ws"), "--tagger-model", "ViT-B-32", "--allow-download",
                                 "--weights-dir", str(tmp_path / "weights")],
                                capture_output=True, text=True, env=env, timeout=600)
    finally:
        hub.shutdown()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    message = " ".join(result.stderr.split())
    assert "error: could not download the OpenCLIP weights 'ViT-B-32'/'openai'" in message
    assert "Check the connection, or fetch the checkpoint yourself" in message and "--pretrained none" in message


def test_an_architecture_with_a_hugging_face_tokenizer_stays_offline_without_allow_download(photos_partition, tmp_path):
    """SigLIP's text tower and tokenizer are Hugging Face files: without --allow-download none is asked of the hub
    (a local one that records every request), and the missing ones are one line naming the way out."""
    _NotFound.asked.clear()
    hub = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_port}", "HF_HOME": str(tmp_path / "hf"),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        env.pop("HF_HUB_OFFLINE", None)
        result = subprocess.run([sys.executable, "-m", "mavias.cli", "discover", "--partition", str(photos_partition),
                                 "--workspace", str(tmp_path / "ws"), "--tagger-model", "ViT-B-16-SigLIP",
                                 "--pretrained", "none", "--device", "cpu"],
                                capture_output=True, text=True, env=env, timeout=600)
    finally:
        hub.shutdown()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    message = " ".join(result.stderr.split())
    assert "ViT-B-16-SigLIP needs Hugging Face files" in message and "--allow-download" in message
    assert _NotFound.asked == []


@pytest.fixture
def photos_partition(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 3, "dog": 3})
    write_import(import_imagefolder(root, progress=False), tmp_path / "ds")
    return tmp_path / "ds"


def test_discover_with_random_weights_warns_that_its_tags_are_noise(photos_partition, tmp_path):
    (tmp_path / "vocabulary.txt").write_text("grass\nsofa\nsky\n")
    (tmp_path / "review.yaml").write_text("version: 1\ndecisions:\n  dog: {irrelevant: [grass]}\n")
    result = CliRunner().invoke(app, ["discover", "--partition", str(photos_partition), "--workspace",
                                      str(tmp_path / "ws"), "--tagger-model", "ViT-S-32", "--pretrained", "none",
                                      "--vocabulary", str(tmp_path / "vocabulary.txt"),
                                      "--review", str(tmp_path / "review.yaml"),
                                      "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--workers", "0",
                                      "--encoder", "openclip-separate:ViT-S-32/none"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "warning: the tags come from a randomly initialised model (--pretrained none): they are noise" in output
    assert "--set encoder=openclip-separate:ViT-S-32/none" in output  # training reads what discovery stored
    # the default threshold, 10 x uniform, is beyond reach with 3 tags: no tag is kept
    assert "0 tags kept for all 6 images" in output and "lower --threshold" in output
    assert "the reviewed decisions name 1 tag(s) their class does not have (dog: grass)" in output
    assert f"tags: {tmp_path / 'ws' / 'tags' / 'ds' / 'tags.parquet'}" in output
    assert f"next: mavias train --manifest {photos_partition / 'manifest.parquet'}" in output
