"""Image preprocessing with torchvision transforms v2, and its description for serving clients.

Transforms run on PIL images and end in a uint8 CHW tensor (the model divides by 255 and normalises inside), so the
evaluation pipeline is exactly PIL's bilinear resize (shorter side, antialiased) + a center crop: a client without
torch reproduces it bit for bit with :func:`mavias.ops.serve.preprocess.preprocess` (PIL + numpy only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
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
    return ResizedCropFlip(cfg.image_size, p.crop_scale, p.crop_ratio, bool(p.flip))


class ResizedCropFlip(v2.Compose):
    """torchvision's RandomResizedCrop(size) (+ RandomHorizontalFlip) for one image, and :meth:`batch` for many at
    once: the same crop boxes (drawn for the whole batch in one go) resampled by a single ``grid_sample``, several
    times faster than a Python loop over small images."""

    ATTEMPTS = 10  # torchvision's: tries at a box inside the image before the central crop

    def __init__(self, size: int, scale: tuple[float, float], ratio: tuple[float, float], flip: bool):
        crop = v2.RandomResizedCrop(size, scale=scale, ratio=ratio, interpolation=InterpolationMode.BILINEAR,
                                    antialias=True)
        super().__init__([v2.ToImage(), crop, *([v2.RandomHorizontalFlip()] if flip else []), v2.ToPureTensor()])
        self.crop, self.size, self.flip = crop, size, flip

    def can_batch(self, shape: torch.Size) -> bool:
        """Whether :meth:`batch` reproduces the per-image transform for images of ``shape``: when none is larger
        than the output, every crop is enlarged, where antialiasing changes nothing."""
        return shape[-2] <= self.size and shape[-1] <= self.size

    def batch(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, C, H, W] (H, W at most ``size``) -> uint8 [B, C, size, size], one random crop (+ flip) each."""
        n, _, height, width = images.shape
        top, left, crop_h, crop_w = self._boxes(n, height, width)
        xs = self._sample_points(left, crop_w, width)  # [n, size]
        if self.flip:
            xs = torch.where((torch.rand(n) < 0.5)[:, None], xs.flip(1), xs)
        ys = self._sample_points(top, crop_h, height)
        grid = torch.stack(torch.broadcast_tensors(xs[:, None, :], ys[:, :, None]), dim=-1)
        out = F.grid_sample(images.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)
        return out.round_().clamp_(0, 255).to(torch.uint8)

    def _sample_points(self, start: torch.Tensor, length: torch.Tensor, extent: int) -> torch.Tensor:
        """Where torchvision's resize of the crop [start, start + length) samples, in grid_sample's [-1, 1] units:
        pixel centres scaled by length / size, held inside the crop (its edge pixels are repeated, not the image's
        pixels beyond them)."""
        steps = (torch.arange(self.size) + 0.5)[None, :] * (length / self.size)[:, None] - 0.5
        points = torch.minimum(steps.clamp(min=0), (length - 1)[:, None]) + start[:, None]
        return (2 * points + 1) / extent - 1

    def _boxes(self, n: int, height: int, width: int) -> tuple[torch.Tensor, ...]:
        """(top, left, height, width) of ``n`` crops, drawn as ``v2.RandomResizedCrop.make_params`` draws one."""
        log_ratio = torch.log(torch.tensor(self.crop.ratio))
        area = height * width * torch.empty(n, self.ATTEMPTS).uniform_(*self.crop.scale)
        aspect = torch.exp(torch.empty(n, self.ATTEMPTS).uniform_(float(log_ratio[0]), float(log_ratio[1])))
        widths, heights = torch.round(torch.sqrt(area * aspect)), torch.round(torch.sqrt(area / aspect))
        fits = (widths > 0) & (widths <= width) & (heights > 0) & (heights <= height)
        first = fits.int().argmax(dim=1, keepdim=True)  # the first attempt that fits
        fallback_h, fallback_w = self._central(height, width)
        found = fits.any(dim=1)
        crop_w = torch.where(found, widths.gather(1, first)[:, 0], float(fallback_w))
        crop_h = torch.where(found, heights.gather(1, first)[:, 0], float(fallback_h))
        top = torch.where(found, torch.floor(torch.rand(n) * (height - crop_h + 1)), (height - crop_h) // 2)
        left = torch.where(found, torch.floor(torch.rand(n) * (width - crop_w + 1)), (width - crop_w) // 2)
        return top, left, crop_h, crop_w

    def _central(self, height: int, width: int) -> tuple[int, int]:
        """torchvision's fallback crop: the whole image, narrowed to the ratio range."""
        in_ratio, ratio = width / height, self.crop.ratio
        if in_ratio < min(ratio):
            return int(round(width / min(ratio))), width
        if in_ratio > max(ratio):
            return height, int(round(height * max(ratio)))
        return height, width


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
