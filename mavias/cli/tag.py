"""`mavias tag`: tag the images of a manifest, one shard or all shards, resumably."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.options import (
    AllowDownload,
    CacheDir,
    Device,
    ImageBatchSize,
    Pretrained,
    TaggerKind,
    TaggerModel,
    Threshold,
    TopK,
    VocabularyPath,
    WeightsDir,
    Workers,
    console,
    counts_table,
    warn,
    writable,
)
from mavias.core.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.core.manifest import load_manifest
from mavias.core.tagging.base import tagging_warnings
from mavias.core.tagging.defaults import DEFAULT_NUM_SHARDS, TAG_THRESHOLD, TAG_TOP_K
from mavias.core.tagging.factory import TaggerSettings, make_tagger

app = typer.Typer(help=__doc__, invoke_without_command=True, no_args_is_help=True)


@app.callback()
def tag(
    manifest: Annotated[Path, typer.Option(help="manifest (.parquet or .csv)")],
    out: Annotated[Path, typer.Option(help="output folder of this partition's tags", callback=writable)],
    tagger: TaggerKind = "auto",
    tagger_model: TaggerModel = OPENCLIP_MODEL,
    pretrained: Pretrained = OPENCLIP_PRETRAINED,
    vocabulary: VocabularyPath = None,
    threshold: Threshold = TAG_THRESHOLD,
    top_k: TopK = TAG_TOP_K,
    device: Device = "auto",
    shard: Annotated[str | None, typer.Option(help="tag only shard i/n (several workers split one partition)")] = None,
    num_shards: Annotated[int | None, typer.Option(help=f"shards when --shard is not given [default: "
                                                        f"{DEFAULT_NUM_SHARDS}]", min=1)] = None,
    store: Annotated[Path | None, typer.Option(help="folder of earlier partitions' tag outputs to reuse", exists=True,
                                               file_okay=False)] = None,
    batch_size: ImageBatchSize = 32,
    workers: Workers = 2,
    cache_dir: CacheDir = None,
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
) -> None:
    """Tag a manifest's images; committed shards are skipped, so a killed run resumes where it stopped."""
    from mavias.core.tagging.run import TagsStore, collect_partition, tag_partition
    from mavias.core.tagging.shards import missing_shards, parse_shard

    shard_spec = parse_shard(shard) if shard else None
    if shard_spec and num_shards not in (None, shard_spec[1]):
        raise typer.BadParameter(f"--shard {shard} splits the partition in {shard_spec[1]}, --num-shards in "
                                 f"{num_shards}: give one of them")
    n = shard_spec[1] if shard_spec else num_shards or DEFAULT_NUM_SHARDS
    df = load_manifest(manifest, check_files=False)  # missing files are quarantined, not fatal
    settings = TaggerSettings(kind=tagger, model=tagger_model, pretrained=pretrained, vocabulary=vocabulary,
                              threshold=threshold, top_k=top_k, device=device, cache_dir=cache_dir,
                              weights_dir=weights_dir, allow_download=allow_download)
    tagger_obj = make_tagger(settings, df)
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
    console.print(counts_table(f"tagging {manifest}", asdict(counts)))
    missing = missing_shards(out, n, df["sample_id"])
    if missing:
        console.print(f"{len(missing)} of {n} shard(s) still to tag: {missing}")
    else:
        tags = collect_partition(df, out, n)
        warn(tagging_warnings(tagger_obj, tags, len(df)))
        console.print(f"all {n} shards tagged: {out}/tags.parquet, {out}/class_tag_counts.parquet")
