"""Image preprocessing with torchvision transforms v2, and its description for serving clients.

Transforms run on PIL images and end in a uint8 CHW tensor (the model divides by 255 and normalises inside), so the
evaluation pipeline is exactly PIL's bilinear resize (shorter side, antialiased) + a center crop: a client without
torch reproduces it bit for bit with :func:`mavias.ops.serve.preprocess.preprocess` (PIL + numpy only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from torchvision.transforms import InterpolationMode, v2

from mavias.core.train.config import TrainConfig
from mavias.core.train.model import IMAGENET_MEAN, IMAGENET_STD

Transform = v2.Transform
DECODE = v2.PILToTensor()  # an image decoded as it is, uint8 [3, H, W]


@dataclass(frozen=True)
class SplitTransforms:
    train: Transform
    eval: Transform
    augmented: bool

    def of(self, split: str) -> Transform:
        """The transform of ``split``: the training one for ``train``, the evaluation one elsewhere."""
        return self.train if split == "train" else self.eval


def eval_resize(cfg: TrainConfig) -> int:
    return cfg.preprocessing.resize or cfg.image_size


def eval_transform(cfg: TrainConfig) -> Transform:
    """Resize the shorter side to ``preprocessing.resize`` (bilinear, antialiased), CenterCrop(image_size)."""
    return v2.Compose([
        v2.Resize(eval_resize(cfg), interpolation=InterpolationMode.BILINEAR, antialias=True),
        v2.CenterCrop(cfg.image_size),
        v2.PILToTensor(),
    ])


def train_transform(cfg: TrainConfig) -> Transform:
    """RandomResizedCrop(image_size) (+ horizontal flip) with ``preprocessing.augment``; else the evaluation
    transform. It takes a decoded uint8 image (PIL or tensor) and returns a uint8 tensor."""
    p = cfg.preprocessing
    if not p.augment:
        return eval_transform(cfg)
    steps: list[Transform] = [v2.ToImage(),
                              v2.RandomResizedCrop(cfg.image_size, scale=p.crop_scale, ratio=p.crop_ratio,
                                                   interpolation=InterpolationMode.BILINEAR, antialias=True)]
    if p.flip:
        steps.append(v2.RandomHorizontalFlip())
    return v2.Compose([*steps, v2.ToPureTensor()])


def split_transforms(cfg: TrainConfig) -> SplitTransforms:
    return SplitTransforms(train_transform(cfg), eval_transform(cfg), cfg.preprocessing.augment)


def describe_eval_preprocessing(cfg: TrainConfig) -> dict[str, Any]:
    """The evaluation preprocessing as the model card publishes it (see :mod:`mavias.ops.serve.preprocess`)."""
    return {
        "resize": eval_resize(cfg),
        "center_crop": cfg.image_size,
        "interpolation": "bilinear",
        "antialias": True,
        "color": "RGB",
        "dtype": "float32",
        "range": [0, 1],
        "layout": "NCHW",
        "normalisation": {"in_model": True, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)},
    }


def load_transformed(path, transform: Transform) -> torch.Tensor:
    """Decode one image file as RGB and apply ``transform`` (uint8 [3, H, W])."""
    with Image.open(path) as img:
        return transform(img.convert("RGB"))
