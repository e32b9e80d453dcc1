"""`mavias encode`: the irrelevant tags of each sample -> one bias embedding per distinct tag set, stored once in the
workspace's embedding store (which training reads; `mavias discover` does this as its last step)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.options import (
    AllowDownload,
    Device,
    EncoderSpec,
    WeightsDir,
    console,
    counts_table,
    writable,
)
from mavias.core.encode.factory import MINILM

app = typer.Typer(help=__doc__, invoke_without_command=True, no_args_is_help=True)


@app.callback()
def encode(
    manifest: Annotated[Path, typer.Option(help="manifest (.parquet or .csv)")],
    relevance: Annotated[Path, typer.Option(help="relevance table (class, tag, relevant, source)")],
    workspace: Annotated[Path, typer.Option(help="workspace whose embedding store receives the vectors (the "
                                                 "--workspace of `mavias train`)",
                                            callback=writable)] = Path(".mavias"),
    tags: Annotated[Path | None, typer.Option(help="tags table (default: the manifest's tags column)")] = None,
    encoder: EncoderSpec = MINILM,
    device: Device = "auto",
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
) -> None:
    """Encode each sample's irrelevant tags; tag sets already in the store are never encoded again."""
    from mavias.core.discovery import Workspace
    from mavias.core.encode import EmbeddingStore, bias_embeddings, make_encoder
    from mavias.core.manifest import load_manifest
    from mavias.core.relevance import load_relevance
    from mavias.core.tagging.base import read_tags
    from mavias.core.train.prepare import sample_tags

    df = load_manifest(manifest, check_files=False)
    tag_lists = sample_tags(df, None if tags is None else read_tags(tags))
    text_encoder = make_encoder(encoder, device=device, weights_dir=weights_dir,
                                allow_download=allow_download)
    store = Workspace(workspace).embeddings(text_encoder.encoder_id)
    embedded = bias_embeddings(df["label"], tag_lists, load_relevance(relevance), text_encoder,
                               EmbeddingStore(store))
    counts = {"samples": len(df), "distinct prompts": embedded.distinct_prompts, "prompts encoded": embedded.encoded}
    token_limit = getattr(text_encoder, "token_limit", None)  # OpenCLIP and MiniLM count context-window overflows
    if token_limit is not None:
        counts |= {f"token limit: {k}": v for k, v in asdict(token_limit).items()}
    console.print(counts_table(f"encoding with {text_encoder.encoder_id}", counts))
    console.print(f"store: {store}")
