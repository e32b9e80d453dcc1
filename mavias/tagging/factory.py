"""A tagger by kind: ``manifest`` (the manifest's own tags) or ``openclip`` (zero-shot over a vocabulary)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

from mavias.tagging.base import Tagger
from mavias.tagging.manifest_tags import ManifestTagger

TAGGER_KINDS = ("auto", "openclip", "manifest")


def resolve_tagger_kind(kind: str, manifest: pd.DataFrame) -> str:
    if kind not in TAGGER_KINDS:
        raise typer.BadParameter(f"unknown tagger {kind!r}; use one of {TAGGER_KINDS}")
    if kind == "auto":
        return "manifest" if "tags" in manifest.columns else "openclip"
    return kind


def make_tagger(
    kind: str,
    *,
    model: str,
    pretrained: str,
    vocabulary: Path | None = None,
    threshold: float,
    top_k: int,
    device: str = "auto",
    cache_dir: Path | None = None,
    weights_dir: str | None = None,
    allow_download: bool = False,
) -> Tagger:
    """A tagger of a resolved kind (openclip or manifest)."""
    if kind == "manifest":
        return ManifestTagger()
    from mavias.tagging.openclip import OpenClipTagger
    from mavias.tagging.vocabulary import load_vocabulary

    return OpenClipTagger(
        model,
        pretrained,
        vocabulary=load_vocabulary(vocabulary),
        threshold=threshold,
        top_k=top_k,
        device=device,
        cache_dir=cache_dir,
        weights_dir=weights_dir,
        allow_download=allow_download,
    )
