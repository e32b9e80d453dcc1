"""The text encoder a training config names, for the bias embeddings of its data."""

from __future__ import annotations

from mavias.encode.base import TextEncoder
from mavias.encode.factory import make_encoder
from mavias.train.config import parse_encoder


def encoder_from_spec(spec: str, *, device: str = "auto", weights_dir: str | None = None) -> TextEncoder:
    """The text encoder a training config names (``minilm`` or ``openclip:<model>/<pretrained>``)."""
    kind, model, pretrained = parse_encoder(spec)
    if kind == "sentence":
        return make_encoder(kind, device=device)
    return make_encoder(kind, model=model, pretrained=pretrained, device=device, weights_dir=weights_dir)
