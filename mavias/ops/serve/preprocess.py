"""The model card's ``preprocessing`` object and its reference implementation with PIL + numpy (no torch).

Shorter side to ``resize`` (the longer one to ``int(resize * long / short)``, as torchvision's Resize), PIL bilinear
(antialiased), then a center crop starting at ``round((size - crop) / 2)``, RGB, float32 in [0, 1], CHW. The
normalisation is inside the model when ``normalisation.in_model`` (the only case the exporter writes).

Encoded images are untrusted: every size is checked from the image's header before anything is decoded or
allocated: its pixels, its aspect ratio, its size after the resize, and the pixels of the whole request.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

MAX_IMAGE_PIXELS = 24_000_000  # one decoded image (a 6000 x 4000 photo); a decompression bomb is refused before
MAX_ASPECT_RATIO = 20  # longer side / shorter side: a 39,000,000 x 1 strip would resize to billions of pixels
MAX_RESIZED_PIXELS = 16_000_000  # after the shorter side is resized to the card's ``resize``
MAX_REQUEST_PIXELS = 64_000_000  # decoded pixels of all the images of one request
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS  # PIL's own guard, for what bypasses ours


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


def resized_size(width: int, height: int, spec: Preprocessing) -> tuple[int, int]:
    """(width, height) after the shorter side goes to ``spec.resize``, as torchvision's Resize."""
    short, long = min(width, height), max(width, height)
    new_short, new_long = spec.resize, int(spec.resize * long / short)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def check_image_size(width: int, height: int, spec: Preprocessing) -> None:
    """Refuse, from the header's size alone, an image whose decoding or resizing would be too large."""
    if min(width, height) < 1:
        raise ImageError(f"image of {width}x{height} pixels is empty")
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageError(f"image of {width}x{height} pixels exceeds {MAX_IMAGE_PIXELS} pixels")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ImageError(f"image of {width}x{height} pixels: aspect ratio over {MAX_ASPECT_RATIO}:1")
    new_w, new_h = resized_size(width, height, spec)
    if new_w * new_h > MAX_RESIZED_PIXELS:
        raise ImageError(f"image of {width}x{height} pixels would be resized to {new_w}x{new_h}, over "
                         f"{MAX_RESIZED_PIXELS} pixels")


def open_image(data: bytes, spec: Preprocessing) -> Image.Image:
    """The image's header, parsed and size-checked; its pixels are not decoded yet."""
    try:
        image = Image.open(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 - PIL raises many types on hostile input; all are the client's
        raise ImageError(f"cannot decode the image ({len(data)} bytes): {err}") from err
    check_image_size(image.width, image.height, spec)
    return image


def decoded(image: Image.Image, spec: Preprocessing) -> np.ndarray:
    """An :func:`open_image` decoded and preprocessed."""
    try:
        image.load()
        return preprocess(image, spec)
    except Exception as err:  # noqa: BLE001 - truncated data, bad chunks, unsupported modes: the client's
        raise ImageError(f"cannot decode the image: {err}") from err


def preprocess(image: Image.Image, spec: Preprocessing) -> np.ndarray:
    """One image -> float32 [3, crop, crop] in [0, 1], normalised too when the model does not do it itself."""
    image = image.convert(spec.color)
    w, h = image.size
    size = resized_size(w, h, spec)
    if size != (w, h):
        image = image.resize(size, Image.BILINEAR)
    crop = spec.center_crop
    top, left = round((size[1] - crop) / 2), round((size[0] - crop) / 2)
    array = np.asarray(image.crop((left, top, left + crop, top + crop)), dtype=np.float32) / 255.0
    if not spec.normalisation.in_model:
        array = (array - np.float32(spec.normalisation.mean)) / np.float32(spec.normalisation.std)
    return array.transpose(2, 0, 1)


def preprocess_encoded(images: list[bytes], spec: Preprocessing) -> np.ndarray:
    """Encoded images (PNG, JPEG…) -> one float32 NCHW batch; every header is checked before any image is decoded."""
    opened = [open_image(data, spec) for data in images]
    pixels = sum(image.width * image.height for image in opened)
    if pixels > MAX_REQUEST_PIXELS:
        raise ImageError(f"the images hold {pixels} pixels together, over {MAX_REQUEST_PIXELS} per request; "
                         "send fewer or smaller images")
    return np.stack([decoded(image, spec) for image in opened])
