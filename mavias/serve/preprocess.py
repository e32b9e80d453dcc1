"""The model card's ``preprocessing`` object and its reference implementation with PIL + numpy (no torch).

Shorter side to ``resize`` (the longer one to ``int(resize * long / short)``, as torchvision's Resize), PIL bilinear
(antialiased), then a center crop starting at ``round((size - crop) / 2)``, RGB, float32 in [0, 1], CHW. The
normalisation is inside the model when ``normalisation.in_model`` (the only case the exporter writes).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field

MAX_IMAGE_PIXELS = 40_000_000  # a decompression bomb is refused before it is decoded


class Normalisation(BaseModel):
    in_model: bool
    mean: list[float] = Field(min_length=3, max_length=3)
    std: list[float] = Field(min_length=3, max_length=3)


class Preprocessing(BaseModel):
    model_config = ConfigDict(frozen=True)

    resize: int = Field(gt=0)
    center_crop: int = Field(gt=0)
    interpolation: Literal["bilinear"] = "bilinear"
    antialias: Literal[True] = True
    color: Literal["RGB"] = "RGB"
    dtype: Literal["float32"] = "float32"
    range: tuple[float, float] = (0.0, 1.0)
    layout: Literal["NCHW"] = "NCHW"
    normalisation: Normalisation


class ImageError(ValueError):
    """An encoded image that cannot be decoded (or is too large to): the client's mistake."""


def card_preprocessing(card: Mapping[str, Any]) -> Preprocessing:
    """The card's ``preprocessing``; cards written before it existed: resize = crop = the input's side."""
    if "preprocessing" in card:
        return Preprocessing.model_validate(card["preprocessing"])
    side = card["input"]["shape"][-1]
    imagenet = Normalisation(in_model=True, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    return Preprocessing(resize=side, center_crop=side, normalisation=imagenet)


def decode_image(data: bytes) -> Image.Image:
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > MAX_IMAGE_PIXELS:
                raise ImageError(f"image of {image.width}x{image.height} pixels exceeds {MAX_IMAGE_PIXELS} pixels")
            image.load()
            return image.copy()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as err:
        raise ImageError(f"cannot decode the image ({len(data)} bytes): {err}") from err


def preprocess(image: Image.Image, spec: Preprocessing) -> np.ndarray:
    """One image -> float32 [3, crop, crop] in [0, 1], normalised too when the model does not do it itself."""
    image = image.convert(spec.color)
    w, h = image.size
    short, long = min(w, h), max(w, h)
    new_short, new_long = spec.resize, int(spec.resize * long / short)
    size = (new_short, new_long) if w <= h else (new_long, new_short)
    if size != (w, h):
        image = image.resize(size, Image.BILINEAR)
    crop = spec.center_crop
    top, left = round((size[1] - crop) / 2), round((size[0] - crop) / 2)
    array = np.asarray(image.crop((left, top, left + crop, top + crop)), dtype=np.float32) / 255.0
    if not spec.normalisation.in_model:
        array = (array - np.float32(spec.normalisation.mean)) / np.float32(spec.normalisation.std)
    return array.transpose(2, 0, 1)


def preprocess_encoded(images: list[bytes], spec: Preprocessing) -> np.ndarray:
    """Encoded images (PNG, JPEG…) -> one float32 NCHW batch."""
    return np.stack([preprocess(decode_image(data), spec) for data in images])
