"""A text encoder by kind: ``sentence`` (offline MiniLM, the default) or ``openclip`` (the paper's CLIP text tower)."""

from __future__ import annotations

import typer

from mavias.encode.base import TextEncoder
from mavias.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.encode.sentence import DEFAULT_MODEL as SENTENCE_MODEL
from mavias.encode.sentence import SentenceTransformerEncoder

ENCODER_KINDS = ("sentence", "openclip")


def make_encoder(
    kind: str,
    *,
    model: str | None = None,
    pretrained: str = OPENCLIP_PRETRAINED,
    mode: str = "collective",
    device: str = "auto",
    weights_dir: str | None = None,
    allow_download: bool = False,
) -> TextEncoder:
    if kind == "sentence":
        return SentenceTransformerEncoder(model or SENTENCE_MODEL, device="cpu" if device == "auto" else device)
    if kind != "openclip":
        raise typer.BadParameter(f"unknown encoder {kind!r}; use one of {ENCODER_KINDS}")
    from mavias.encode.openclip import OpenClipTextEncoder

    return OpenClipTextEncoder(
        model or OPENCLIP_MODEL,
        pretrained,
        device=device,
        mode=mode,
        weights_dir=weights_dir,
        allow_download=allow_download,
    )
