"""`mavias discover --partition P`: tag -> judge -> encode one partition, paying only for what is new."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.options import (
    AllowDownload,
    CacheDir,
    Device,
    EncoderSpec,
    ImageBatchSize,
    JudgeKind,
    LlmBaseUrl,
    LlmMaxRetries,
    LlmModel,
    LlmTimeout,
    Pretrained,
    ReviewPath,
    TaggerKind,
    TaggerModel,
    Threshold,
    TopK,
    VocabularyPath,
    WeightsDir,
    Workers,
    command_line,
    console,
    counts_table,
    warn,
    writable,
)
from mavias.core.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.core.encode.factory import MINILM
from mavias.core.judging.factory import DEFAULT_BASE_URL, DEFAULT_LLM_MODEL, JudgeSettings, make_judge
from mavias.core.judging.review import load_review, tags_of_classes
from mavias.core.manifest import load_manifest
from mavias.core.relevance import load_relevance
from mavias.core.tagging.base import read_tags, tagging_warnings
from mavias.core.tagging.defaults import DEFAULT_NUM_SHARDS, TAG_THRESHOLD, TAG_TOP_K
from mavias.core.tagging.factory import TaggerSettings, make_tagger
from mavias.errors import UserError

app = typer.Typer(help=__doc__, invoke_without_command=True, no_args_is_help=True)


@app.callback()
def discover(
    partition: Annotated[Path, typer.Option(help="partition folder with manifest.parquet, or a manifest file")],
    workspace: Annotated[Path, typer.Option(help="workspace accumulating tags, decisions, embeddings",
                                            callback=writable)] = Path("runs/discovery"),
    name: Annotated[str | None, typer.Option(help="partition name (default: the manifest's folder name)")] = None,
    tagger: TaggerKind = "auto",
    tagger_model: TaggerModel = OPENCLIP_MODEL,
    pretrained: Pretrained = OPENCLIP_PRETRAINED,
    vocabulary: VocabularyPath = None,
    threshold: Threshold = TAG_THRESHOLD,
    top_k: TopK = TAG_TOP_K,
    judge: JudgeKind = "offline",
    base_url: LlmBaseUrl = DEFAULT_BASE_URL,
    llm_model: LlmModel = DEFAULT_LLM_MODEL,
    timeout: LlmTimeout = 120.0,
    max_retries: LlmMaxRetries = 5,
    review: ReviewPath = None,
    encoder: EncoderSpec = MINILM,
    device: Device = "auto",
    num_shards: Annotated[int, typer.Option(help="tagging shards (each committed atomically)",
                                            min=1)] = DEFAULT_NUM_SHARDS,
    batch_size: ImageBatchSize = 32,
    workers: Workers = 2,
    cache_dir: CacheDir = None,
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
) -> None:
    """Run tag -> judge -> encode on a partition and print what it cost (zero on a second run), where its tags and
    relevance decisions are, and the training command that uses them."""
    from mavias.core.discovery import Workspace, discover_partition, manifest_file, partition_name
    from mavias.core.encode import make_encoder

    manifest_path = manifest_file(partition)
    if partition.is_dir() and not manifest_path.exists():
        raise UserError(f"{partition} has no {manifest_path.name}: discovery reads an imported partition",
                        hint=f"import the images first (mavias data import imagefolder {partition} --out DIR), then "
                        f"discover DIR; or audit the folder in one command (mavias audit {partition} --out DIR)")
    manifest = load_manifest(manifest_path, check_files=False)
    tagger_obj = make_tagger(TaggerSettings(kind=tagger, model=tagger_model, pretrained=pretrained,
                                            vocabulary=vocabulary, threshold=threshold, top_k=top_k, device=device,
                                            cache_dir=cache_dir, weights_dir=weights_dir,
                                            allow_download=allow_download), manifest)
    encoder_obj = make_encoder(encoder, device=device, weights_dir=weights_dir,
                               allow_download=allow_download)
    judge_obj = make_judge(JudgeSettings(kind=judge, base_url=base_url, model=llm_model, timeout=timeout,
                                         max_retries=max_retries))
    reviewed = load_review(review) if review else None
    counts = discover_partition(partition, workspace, tagger_obj, judge_obj, encoder_obj, name=name,
                                review=reviewed, num_shards=num_shards,
                                batch_size=batch_size, num_workers=workers)
    summary = asdict(counts)
    per_class = summary.pop("llm_requests_per_class")
    summary |= {f"llm requests: {cls}": n for cls, n in per_class.items()}
    console.print(counts_table(f"discovery of {partition}", summary))
    ws, part = Workspace(workspace), partition_name(partition, name)
    usable = counts.images - counts.images_quarantined
    warn(tagging_warnings(tagger_obj, read_tags(ws.tags_table(part)), usable)
         + (reviewed.unmatched(tags_of_classes(load_relevance(ws.relevance(part)), manifest["label"]))
            if reviewed else []))
    console.print(f"tags: {ws.tags_table(part)}\nrelevance decisions: {ws.relevance(part)}\n"
                  "next: " + command_line("mavias", "train", "--manifest", manifest_path, "--relevance",
                                          ws.relevance(part), "--tags", ws.tags_table(part), "--workspace", workspace,
                                          "--set", "method=erm", *_encoder_setting(encoder), "--out", "runs/erm"),
                  soft_wrap=True)


def _encoder_setting(encoder: str) -> list[str]:
    """The training option that reads the embeddings this discovery stored (none for the default encoder)."""
    return [] if encoder == MINILM else ["--set", f"encoder={encoder}"]
