"""`mavias encode`: irrelevant tags of each sample -> one bias embedding per distinct tag set, stored once."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.tag import AllowDownload, Device, Pretrained, WeightsDir, counts_table
from mavias.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.encode.factory import make_encoder
from mavias.encode.samples import encode_samples, save_sample_embeddings
from mavias.encode.sentence import DEFAULT_MODEL as SENTENCE_MODEL
from mavias.encode.store import EmbeddingStore
from mavias.manifest import load_manifest
from mavias.relevance import irrelevant_tags, load_relevance
from mavias.tagging.base import read_tags, tag_lists
from mavias.utils.console import make_console

EncoderKind = Annotated[
    str, typer.Option("--encoder", help="sentence (offline MiniLM, default) or openclip (the paper's CLIP text tower)")
]
EncoderModel = Annotated[
    str | None, typer.Option("--encoder-model", help=f"default {SENTENCE_MODEL} / {OPENCLIP_MODEL}")
]
EncodeMode = Annotated[str, typer.Option(help="openclip: collective (one prompt) or separate (mean per tag)")]


app = typer.Typer(help=__doc__, invoke_without_command=True, no_args_is_help=True)


@app.callback()
def encode(
    manifest: Annotated[Path, typer.Option(help="manifest (.parquet or .csv)")],
    relevance: Annotated[Path, typer.Option(help="relevance table (class, tag, relevant, source)")],
    store: Annotated[Path, typer.Option(help="embedding store folder (shared across partitions)")],
    out: Annotated[Path, typer.Option(help="sample embeddings table to write (sample_id, key)")],
    tags: Annotated[Path | None, typer.Option(help="tags table (default: the manifest's tags column)")] = None,
    encoder: EncoderKind = "sentence",
    encoder_model: EncoderModel = None,
    pretrained: Pretrained = OPENCLIP_PRETRAINED,
    mode: EncodeMode = "collective",
    device: Device = "auto",
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
) -> None:
    """Encode each sample's irrelevant tags; tag sets already in the store are never encoded again."""
    df = load_manifest(manifest, check_files=False)
    sample_tags = tag_lists(read_tags(tags), df["sample_id"]) if tags else df["tags"]
    bias_tags = irrelevant_tags(df["label"], sample_tags.set_axis(df.index), load_relevance(relevance))
    text_encoder = make_encoder(
        encoder,
        model=encoder_model,
        pretrained=pretrained,
        mode=mode,
        device=device,
        weights_dir=weights_dir,
        allow_download=allow_download,
    )
    keys, n_encoded = encode_samples(df["sample_id"], bias_tags, text_encoder, EmbeddingStore(store))
    save_sample_embeddings(keys, out)
    counts = {"samples": len(keys), "distinct prompts": keys["key"].nunique(), "prompts encoded": n_encoded}
    token_limit = getattr(text_encoder, "token_limit", None)  # OpenCLIP encoders count context-window overflows
    if token_limit is not None:
        counts |= {f"token limit: {k}": v for k, v in asdict(token_limit).items()}
    make_console().print(counts_table(f"encoding with {text_encoder.encoder_id}", counts))
