"""The nightly preflight names the OpenCLIP weights a worker lacks, and where to put them, before a night starts."""

import subprocess
import sys
from pathlib import Path

import yaml

from mavias.ops.nightly.config import load_nightly_config
from mavias.ops.nightly.weights import missing_model_weights


def _config(tmp_path, tagger: str, encoder: str):
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump({"model_name": "m", "workspace": str(tmp_path / "ws"), "s3": {"bucket": "b"},
                                    "train": {"overrides": {"encoder": encoder}},
                                    "discovery": {"tagger": tagger, "weights_dir": str(tmp_path / "weights")}}))
    return load_nightly_config(path, environ={})


def test_missing_weights_are_named_with_the_folder_they_were_looked_for_in(tmp_path):
    problems = missing_model_weights(_config(tmp_path, "openclip", "openclip:ViT-B-32/openai"))
    assert len(problems) == 2
    assert problems[0].startswith("the tagger's OpenCLIP weights 'ViT-L-14'/'openai' are not in the local cache")
    assert problems[1].startswith("the text encoder's OpenCLIP weights 'ViT-B-32'/'openai'")
    assert all(str(tmp_path / "weights") in p and p.endswith("put the weights in discovery.weights_dir")
               for p in problems)


def test_weights_that_are_there_and_the_offline_defaults_need_nothing(tmp_path):
    checkpoint = tmp_path / "vit-b-32.pt"
    checkpoint.write_bytes(b"weights")
    assert missing_model_weights(_config(tmp_path, "manifest", f"openclip:ViT-B-32/{checkpoint}")) == []
    assert missing_model_weights(_config(tmp_path, "manifest", "minilm")) == []


def test_a_night_without_openclip_models_imports_neither_open_clip_nor_torch(tmp_path):
    probe = ("import sys; from tests.ops.nightly.test_weights_preflight import _config; "
             "from mavias.ops.nightly.weights import missing_model_weights; from pathlib import Path; "
             "assert missing_model_weights(_config(Path(sys.argv[1]), 'manifest', 'minilm')) == []; "
             "print('open_clip' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[3])
    assert done.stdout.strip() == "False False", done.stderr[-2000:]
