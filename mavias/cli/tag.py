"""`mavias tag`: tag the images of a manifest, one shard or all shards, resumably."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mavias.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.manifest import load_manifest
from mavias.tagging.base import tagging_warnings
from mavias.tagging.defaults import TAG_THRESHOLD, TAG_TOP_K
from mavias.tagging.factory import make_tagger, resolve_tagger_kind
from mavias.tagging.run import (
    DEFAULT_NUM_SHARDS,
    TagsStore,
    collect_partition,
    missing_shards,
    parse_shard,
    tag_partition,
)
from mavias.utils.console import make_console

TaggerKind = Annotated[
    str,
    typer.Option(
        "--tagger",
        help="openclip (zero-shot over a vocabulary), manifest (its tags column), or auto (manifest if it has tags)",
    ),
]
Model = Annotated[str, typer.Option(help="open_clip architecture")]
Pretrained = Annotated[
    str, typer.Option(help="open_clip pretrained tag, a local checkpoint file, or 'none' for a random-init model")
]
VocabularyPath = Annotated[Path | None, typer.Option("--vocabulary", help="tag vocabulary file (default: built-in)")]
Threshold = Annotated[float, typer.Option(help="keep tags with probability >= threshold x uniform (1/|vocabulary|)")]
TopK = Annotated[int, typer.Option("--top-k", help="at most this many tags per image")]
Device = Annotated[str, typer.Option(help="auto (GPU when present), cpu, cuda, cuda:1, ...")]
CacheDir = Annotated[Path | None, typer.Option(help="cache of vocabulary embeddings (default ~/.cache/mavias)")]
WeightsDir = Annotated[str | None, typer.Option(help="open_clip / Hugging Face weights cache folder")]
AllowDownload = Annotated[bool, typer.Option(help="allow downloading weights (default: offline, local cache only)")]
BatchSize = Annotated[int, typer.Option(help="images per batch")]
Workers = Annotated[int, typer.Option(help="data-loading worker processes")]


def counts_table(title: str, counts: dict[str, int]) -> Table:
    table = Table(title=title)
    table.add_column("count")
    table.add_column("value", justify="right")
    for name, value in counts.items():
        table.add_row(name, str(value))
    return table


app = typer.Typer(help=__doc__, invoke_without_command=True, no_args_is_help=True)


@app.callback()
def tag(
    manifest: Annotated[Path, typer.Option(help="manifest (.parquet or .csv)")],
    out: Annotated[Path, typer.Option(help="output folder of this partition's tags")],
    tagger: TaggerKind = "auto",
    model: Model = OPENCLIP_MODEL,
    pretrained: Pretrained = OPENCLIP_PRETRAINED,
    vocabulary: VocabularyPath = None,
    threshold: Threshold = TAG_THRESHOLD,
    top_k: TopK = TAG_TOP_K,
    device: Device = "auto",
    shard: Annotated[str | None, typer.Option(help="tag only shard i/n (several workers split one partition)")] = None,
    num_shards: Annotated[int, typer.Option(help="shards when --shard is not given")] = DEFAULT_NUM_SHARDS,
    store: Annotated[Path | None, typer.Option(help="folder of earlier partitions' tag outputs to reuse")] = None,
    batch_size: BatchSize = 32,
    workers: Workers = 2,
    cache_dir: CacheDir = None,
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
) -> None:
    """Tag a manifest's images; committed shards are skipped, so a killed run resumes where it stopped."""
    shard_spec = parse_shard(shard) if shard else None
    n = shard_spec[1] if shard_spec else num_shards
    df = load_manifest(manifest, check_files=False)  # missing files are quarantined, not fatal
    tagger_obj = make_tagger(
        resolve_tagger_kind(tagger, df),
        model=model,
        pretrained=pretrained,
        vocabulary=vocabulary,
        threshold=threshold,
        top_k=top_k,
        device=device,
        cache_dir=cache_dir,
        weights_dir=weights_dir,
        allow_download=allow_download,
    )
    counts = tag_partition(
        df,
        manifest.parent,
        tagger_obj,
        out,
        shard=shard_spec,
        num_shards=n,
        store=TagsStore(store) if store else None,
        batch_size=batch_size,
        num_workers=workers,
    )
    console = make_console()
    console.print(counts_table(f"tagging {manifest}", asdict(counts)))
    missing = missing_shards(out, n)
    if missing:
        console.print(f"{len(missing)} of {n} shard(s) still to tag: {missing}")
    else:
        tags = collect_partition(df, out, n)
        for warning in tagging_warnings(tagger_obj, tags, len(df)):
            console.print(f"[bold red]warning:[/] {warning}")
        console.print(f"all {n} shards tagged: {out}/tags.parquet, {out}/class_tag_counts.parquet")
