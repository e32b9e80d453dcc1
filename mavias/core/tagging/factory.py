"""A tagger from its settings: ``manifest`` (the manifest's own tags), ``openclip`` (zero-shot over a vocabulary),
or ``auto`` (the manifest's tags where it has a ``tags`` column, else OpenCLIP)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mavias.core.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.core.tagging.base import Tagger
from mavias.core.tagging.defaults import TAG_THRESHOLD, TAG_TOP_K
from mavias.core.tagging.manifest_tags import ManifestTagger
from mavias.errors import UserError

TAGGER_KINDS = ("auto", "openclip", "manifest")
RANDOM_PRETRAINED = ("none", "random", "")


@dataclass(frozen=True)
class TaggerSettings:
    """Which tagger, and how the OpenCLIP one runs (its weights offline-first, from ``weights_dir`` or the cache)."""

    kind: str = "auto"
    model: str = OPENCLIP_MODEL
    pretrained: str = OPENCLIP_PRETRAINED
    vocabulary: Path | None = None
    threshold: float = TAG_THRESHOLD
    top_k: int = TAG_TOP_K
    device: str = "auto"
    cache_dir: Path | None = None
    weights_dir: str | None = None
    allow_download: bool = False

    @property
    def random_weights(self) -> bool:
        """``pretrained`` names no weights: an OpenCLIP tagger would tag with a random init (noise)."""
        return self.pretrained.lower() in RANDOM_PRETRAINED


def tagger_kind_for(kind: str, manifest: pd.DataFrame) -> str:
    """``kind`` with ``auto`` decided by the manifest: its own tags where it has a ``tags`` column."""
    if kind not in TAGGER_KINDS:
        raise UserError(f"unknown tagger {kind!r}", hint=f"use one of {', '.join(TAGGER_KINDS)}")
    if kind == "auto":
        return "manifest" if "tags" in manifest.columns else "openclip"
    return kind


def make_tagger(settings: TaggerSettings, manifest: pd.DataFrame | None = None) -> Tagger:
    """The tagger ``settings`` name; ``auto`` needs the ``manifest`` to be tagged."""
    kind = settings.kind if manifest is None else tagger_kind_for(settings.kind, manifest)
    if kind == "manifest":
        return ManifestTagger()
    if kind != "openclip":
        raise UserError(f"tagger {kind!r} cannot be made without the manifest it tags",
                        hint="pass the manifest, or choose openclip or manifest")
    from mavias.core.tagging.openclip import OpenClipTagger
    from mavias.core.tagging.vocabulary import load_vocabulary

    return OpenClipTagger(settings.model, settings.pretrained, vocabulary=load_vocabulary(settings.vocabulary),
                          threshold=settings.threshold, top_k=settings.top_k, device=settings.device,
                          cache_dir=settings.cache_dir, weights_dir=settings.weights_dir,
                          allow_download=settings.allow_download)
