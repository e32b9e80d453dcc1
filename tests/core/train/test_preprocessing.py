"""Transforms v2 preprocessing: the described evaluation preprocessing is reproduced bit for bit by PIL + numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.transforms.v2 import functional as TF

from mavias.core.datasets import SplitOptions, import_imagefolder
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.train.config import TrainConfig, load_config
from mavias.core.train.data import IndexedInputs, image_split
from mavias.core.train.transforms import (
    ResizedCropFlip,
    describe_eval_preprocessing,
    eval_transform,
    train_transform,
)
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


@pytest.mark.parametrize("flip", [False, True])
def test_a_batch_is_cropped_and_resized_as_torchvision_does_each_image(monkeypatch, flip):
    augment = ResizedCropFlip(32, (0.2, 1.0), (0.75, 4 / 3), flip)
    images = torch.randint(0, 256, (200, 3, 32, 32), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    torch.manual_seed(0)
    top, left, height, width = boxes = augment._boxes(200, 32, 32)
    monkeypatch.setattr(augment, "_boxes", lambda *_: boxes)
    got = augment.batch(images).int()
    expected = torch.stack([TF.resized_crop(images[i], int(top[i]), int(left[i]), int(height[i]), int(width[i]),
                                            [32, 32], antialias=True) for i in range(200)]).int()
    plain = (got - expected).abs().amax(dim=(1, 2, 3)) <= 1  # uint8 rounding
    mirrored = (got - TF.horizontal_flip(expected)).abs().amax(dim=(1, 2, 3)) <= 1
    assert bool((plain | mirrored).all())
    assert 60 < int(mirrored.sum()) < 140 if flip else bool(plain.all())


def test_batched_crop_boxes_are_drawn_as_torchvision_draws_them():
    augment = ResizedCropFlip(32, (0.3, 1.0), (0.75, 4 / 3), flip=False)
    torch.manual_seed(0)
    top, left, height, width = augment._boxes(4000, 32, 24)
    assert bool((top >= 0).all() and (left >= 0).all() and (top + height <= 32).all() and (left + width <= 24).all())
    assert bool(((height * width) >= 0.3 * 32 * 24 * 0.85).all())  # the smallest area, up to rounding the sides
    tv = augment.crop
    reference = [tv.make_params([torch.zeros(3, 32, 24)]) for _ in range(4000)]
    assert float((height * width).mean()) == pytest.approx(np.mean([p["height"] * p["width"] for p in reference]),
                                                           rel=0.02)
    assert float((width / height).mean()) == pytest.approx(np.mean([p["width"] / p["height"] for p in reference]),
                                                           rel=0.02)



def test_batched_crops_take_every_position_and_fall_back_to_torchvisions_central_crop():
    torch.manual_seed(0)
    top, left, height, width = ResizedCropFlip(32, (0.25, 0.25), (1.0, 1.0), flip=False)._boxes(4000, 32, 32)
    assert set(height.tolist()) == set(width.tolist()) == {16.0}
    assert set(top.tolist()) == set(left.tolist()) == set(map(float, range(17)))  # as torch.randint(0, 32 - 16 + 1)
    narrow = ResizedCropFlip(32, (1.0, 1.0), (0.75, 4 / 3), flip=False)  # no box of that area fits a 32 x 4 image
    expected = narrow.crop.make_params([torch.zeros(3, 32, 4)])
    boxes = narrow._boxes(3, 32, 4)
    assert all(b.tolist() == [expected[k]] * 3 for b, k in zip(boxes, ("top", "left", "height", "width"), strict=True))

@pytest.mark.parametrize(("size", "batched"), [((32, 32), True), ((24, 30), True), ((48, 40), False)])
def test_a_loader_augments_a_batch_at_once_only_where_no_crop_is_shrunk(tmp_path, monkeypatch, size, batched):
    root = write_imagefolder(tmp_path / "data", {"a": 5, "b": 5}, size=size)
    manifest = import_imagefolder(root, SplitOptions(val=0.0, test=0.0), progress=False).manifest
    train = image_split(manifest, tmp_path, ["a", "b"], train_transform(_cfg(augment=True, flip=True)), 32,
                        random=True, progress=False)
    calls = []
    monkeypatch.setattr(ResizedCropFlip, "batch", lambda self, x, _batch=ResizedCropFlip.batch: calls.append(len(x))
                        or _batch(self, x))
    images, rows = next(iter(DataLoader(IndexedInputs(train.inputs), batch_size=4)))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.uint8 and rows.tolist() == [0, 1, 2, 3]
    assert calls == ([4] if batched else [])


def test_presets_train_as_the_authors_and_the_config_records_it(tmp_path):
    cfg = load_config(preset="waterbirds")
    assert cfg.preprocessing.augment and cfg.preprocessing.resize == 256 and cfg.image_size == 224
    assert cfg.backbone.pretrained and cfg.encoder == "openclip:ViT-L-14/openai"
    with pytest.raises(ValueError, match="resize"):
        _cfg(resize=16)
