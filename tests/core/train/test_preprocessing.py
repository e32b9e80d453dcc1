"""Transforms v2 preprocessing: the described evaluation preprocessing is reproduced bit for bit by PIL + numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from mavias.core.datasets import SplitOptions, import_imagefolder
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.train.config import TrainConfig, load_config
from mavias.core.train.data import image_split
from mavias.core.train.transforms import describe_eval_preprocessing, eval_transform, train_transform
from mavias.ops.serve.preprocess import Preprocessing, preprocess


def _cfg(**preprocessing) -> TrainConfig:
    return TrainConfig(image_size=32, preprocessing=preprocessing)


def test_description_schema():
    desc = describe_eval_preprocessing(_cfg(resize=36))
    assert desc == {
        "resize": 36, "center_crop": 32, "interpolation": "bilinear", "antialias": True, "color": "RGB",
        "dtype": "float32", "range": [0, 1], "layout": "NCHW",
        "normalisation": {"in_model": True, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    }
    assert describe_eval_preprocessing(_cfg())["resize"] == 32  # default: shorter side to image_size


@pytest.mark.parametrize("size", [(57, 41), (41, 57), (32, 32), (300, 200)])
@pytest.mark.parametrize("resize", [None, 36])
def test_pil_numpy_client_matches_the_eval_transform_exactly(size, resize):
    cfg = _cfg(resize=resize)
    rng = np.random.default_rng(sum(size))
    image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    expected = eval_transform(cfg)(image)
    assert expected.dtype == torch.uint8 and expected.shape == (3, 32, 32)
    got = preprocess(image, Preprocessing.model_validate(describe_eval_preprocessing(cfg)))
    assert got.dtype == np.float32 and got.shape == (3, 32, 32)
    np.testing.assert_array_equal(np.rint(got * 255).astype(np.uint8), expected.numpy())


def test_augmentation_is_random_and_decoded_lazily(tmp_path):
    root = write_imagefolder(tmp_path / "data", {"a": 4, "b": 4}, size=(48, 40))
    manifest = import_imagefolder(root, SplitOptions(val=0.0, test=0.0), progress=False).manifest
    cfg = _cfg(augment=True)
    train = image_split(manifest, tmp_path, ["a", "b"], train_transform(cfg), 32, random=True, progress=False)
    evaluation = image_split(manifest, tmp_path, ["a", "b"], eval_transform(cfg), 32, progress=False)
    assert train.inputs.cache is None and evaluation.inputs.cache is not None
    torch.manual_seed(0)
    first, second = train.inputs[0], train.inputs[0]
    assert first.shape == second.shape == (3, 32, 32) and not torch.equal(first, second)
    assert torch.equal(evaluation.inputs[0], eval_transform(cfg)(Image.open(manifest["uri"][0]).convert("RGB")))


def test_presets_train_as_the_authors_and_the_config_records_it(tmp_path):
    cfg = load_config(preset="waterbirds")
    assert cfg.preprocessing.augment and cfg.preprocessing.resize == 256 and cfg.image_size == 224
    assert cfg.backbone.pretrained and cfg.encoder == "openclip:ViT-L-14/openai"
    with pytest.raises(ValueError, match="resize"):
        _cfg(resize=16)
