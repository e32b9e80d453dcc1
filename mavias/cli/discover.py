"""`mavias discover --partition P`: tag -> judge -> encode one partition, paying only for what is new."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.encode import EncodeMode, EncoderKind, EncoderModel
from mavias.cli.judge import BaseUrl, JudgeKind, ReviewPath
from mavias.cli.tag import (
    AllowDownload,
    BatchSize,
    CacheDir,
    Device,
    Model,
    Pretrained,
    TaggerKind,
    Threshold,
    TopK,
    VocabularyPath,
    WeightsDir,
    Workers,
    counts_table,
)
from mavias.discover import Workspace, discover_partition, partition_name, resolve_manifest
from mavias.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.encode.factory import make_encoder
from mavias.judging.factory import make_judge
from mavias.judging.review import load_review
from mavias.manifest import load_manifest
from mavias.tagging.base import read_tags, tagging_warnings
from mavias.tagging.defaults import TAG_THRESHOLD, TAG_TOP_K
from mavias.tagging.factory import make_tagger, resolve_tagger_kind
from mavias.tagging.run import DEFAULT_NUM_SHARDS
from mavias.utils.console import make_console

LlmModel = Annotated[str, typer.Option("--llm-model", envvar="MAVIAS_LLM_MODEL", help="LLM model name (--judge llm)")]

app = typer.Typer(help=__doc__, invoke_without_command=True, no_args_is_help=True)


@app.callback()
def discover(
    partition: Annotated[Path, typer.Option(help="partition folder with manifest.parquet, or a manifest file")],
    workspace: Annotated[Path, typer.Option(help="workspace accumulating tags, decisions, embeddings")] = Path(
        "runs/discovery"
    ),
    name: Annotated[str | None, typer.Option(help="partition name (default: the manifest's folder name)")] = None,
    tagger: TaggerKind = "auto",
    model: Model = OPENCLIP_MODEL,
    pretrained: Pretrained = OPENCLIP_PRETRAINED,
    vocabulary: VocabularyPath = None,
    threshold: Threshold = TAG_THRESHOLD,
    top_k: TopK = TAG_TOP_K,
    judge: JudgeKind = "offline",
    base_url: BaseUrl = "https://api.openai.com/v1",
    llm_model: LlmModel = "gpt-4o",
    review: ReviewPath = None,
    encoder: EncoderKind = "sentence",
    encoder_model: EncoderModel = None,
    mode: EncodeMode = "collective",
    device: Device = "auto",
    num_shards: Annotated[int, typer.Option(help="tagging shards (each committed atomically)")] = DEFAULT_NUM_SHARDS,
    batch_size: BatchSize = 32,
    workers: Workers = 2,
    cache_dir: CacheDir = None,
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
) -> None:
    """Run tag -> judge -> encode on a partition and print what it cost (zero on a second run), where its tags and
    relevance decisions are, and the training command that uses them."""
    manifest_path = resolve_manifest(partition)
    manifest = load_manifest(manifest_path, check_files=False)
    tagger_obj = make_tagger(resolve_tagger_kind(tagger, manifest), model=model, pretrained=pretrained,
                             vocabulary=vocabulary, threshold=threshold, top_k=top_k, device=device,
                             cache_dir=cache_dir, weights_dir=weights_dir, allow_download=allow_download)
    encoder_obj = make_encoder(
        encoder,
        model=encoder_model or (model if encoder == "openclip" else None),  # same family as the tagger
        pretrained=pretrained, mode=mode, device=device, weights_dir=weights_dir, allow_download=allow_download,
    )
    counts = discover_partition(partition, workspace, tagger_obj, make_judge(judge, base_url=base_url, model=llm_model),
                                encoder_obj, name=name, review=load_review(review) if review else None,
                                num_shards=num_shards, batch_size=batch_size, num_workers=workers)
    summary = asdict(counts)
    per_class = summary.pop("llm_requests_per_class")
    summary |= {f"llm requests: {cls}": n for cls, n in per_class.items()}
    console = make_console()
    console.print(counts_table(f"discovery of {partition}", summary))
    ws, part = Workspace(workspace), partition_name(partition, name)
    usable = counts.images - counts.images_quarantined
    for warning in tagging_warnings(tagger_obj, read_tags(ws.tags_table(part)), usable):
        console.print(f"[bold red]warning:[/] {warning}")
    console.print(f"tags: {ws.tags_table(part)}\nrelevance decisions: {ws.relevance(part)}\n"
                  f"next: mavias train --manifest {manifest_path} --relevance {ws.relevance(part)} "
                  f"--tags {ws.tags_table(part)} --workspace {workspace} --set method=erm --out runs/erm",
                  soft_wrap=True)
