"""`mavias audit PATH --out DIR`: your own images audited in one command (:mod:`mavias.ops.audit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.options import (
    AllowDownload,
    ConfigFile,
    Device,
    JudgeKind,
    LlmBaseUrl,
    LlmMaxRetries,
    LlmModel,
    LlmTimeout,
    MinSupport,
    Overrides,
    Preset,
    Pretrained,
    ReviewPath,
    TaggerModel,
    Threshold,
    TopK,
    VocabularyPath,
    WeightsDir,
    console,
    model_name,
    parse_overrides,
    warn,
    writable,
)
from mavias.cli.train import summary_table
from mavias.core.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.judging.factory import DEFAULT_BASE_URL, DEFAULT_LLM_MODEL, JudgeSettings
from mavias.core.tagging.defaults import TAG_THRESHOLD, TAG_TOP_K
from mavias.core.tagging.factory import TaggerSettings


def audit_command(
    path: Annotated[Path, typer.Argument(help="a folder of images (<class>/ sub-folders, or train/ val/ test/ above "
                                              "them), a published dataset's folder, or a manifest")],
    out: Annotated[Path, typer.Option("--out", help="audit folder (resumes an audit of the same inputs)",
                                                callback=writable)],
    tags: Annotated[Path | None, typer.Option("--tags", help="tags sidecar: CSV image,tags ('a;b', image relative to "
                                                             "PATH) or Parquet with a list column tags")] = None,
    min_support: MinSupport = MIN_SUPPORT,
    layout: Annotated[str, typer.Option(help="auto, imagefolder, waterbirds, celeba, urbancars or manifest")] = "auto",
    tagger_model: TaggerModel = OPENCLIP_MODEL,
    pretrained: Pretrained = OPENCLIP_PRETRAINED,
    vocabulary: VocabularyPath = None,
    threshold: Threshold = TAG_THRESHOLD,
    top_k: TopK = TAG_TOP_K,
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
    allow_random_tags: Annotated[bool, typer.Option(help="tag with random weights (--pretrained none) although the "
                                                         "tags are noise")] = False,
    judge: JudgeKind = "offline",
    base_url: LlmBaseUrl = DEFAULT_BASE_URL,
    llm_model: LlmModel = DEFAULT_LLM_MODEL,
    timeout: LlmTimeout = 120.0,
    max_retries: LlmMaxRetries = 5,
    review: ReviewPath = None,
    config: ConfigFile = None,
    preset: Preset = None,
    set_: Overrides = [],
    gates: Annotated[Path | None, typer.Option(
        "--gates", help="quality-gate YAML (default: the shipped one, its worst-group size set by --min-support)")] = None,
    device: Device = "auto",
    name: Annotated[str | None, typer.Option(help="the model's name (default: the data folder's)",
                                             callback=model_name)] = None,
) -> None:
    """Audit your own images in one command: import, tag, judge, ERM reference, MAVias, evaluate, export and the HTML
    report, resumably."""
    from mavias.ops.audit import AuditOptions, run_audit

    tagger = TaggerSettings(model=tagger_model, pretrained=pretrained, vocabulary=vocabulary, threshold=threshold,
                            top_k=top_k, weights_dir=weights_dir, allow_download=allow_download)
    judge_settings = JudgeSettings(kind=judge, base_url=base_url, model=llm_model, timeout=timeout,
                                   max_retries=max_retries)
    result = run_audit(AuditOptions(path=path, out=out, tags=tags, layout=layout, min_support=min_support,
                                    tagger=tagger, allow_random_tags=allow_random_tags, judge=judge_settings,
                                    review=review, config=config, preset=preset, overrides=parse_overrides(set_),
                                    gates=gates, device=device, name=name))
    table, _ = summary_table(result.evaluation)
    console.print(table)
    warn(result.caveats)
    console.print("how far to trust the tags and the relevance decisions:\n" + "\n".join(
        f"  - {line}" for line in result.trust), soft_wrap=True, markup=False)
    console.print(f"every (class, tag) pair tested, with why it is or is not in B': {result.evidence}\n"
                  f"biased tags (B'): {_biased_by_class(result.biased_tags)}\n"
                  f"{_how_to_review(result.relevance, review)}", soft_wrap=True)
    console.print(f"quality gates: {'passed' if result.gates_passed else 'FAILED (see the report)'}\n"
                  f"report: {result.report}\nmodel: {result.model} (serve it: mavias serve --model-dir "
                  f"{result.model.parent})", soft_wrap=True)


def _how_to_review(relevance: Path, review: Path | None) -> str:
    """The next step when a relevance decision is wrong: the same audit with a review, which trains MAVias again and
    keeps the reference."""
    kept = "(the reference is kept, MAVias trains again)"
    if review is not None:
        return f"to correct another relevance decision: edit {review}, then run this audit again with it {kept}"
    return (f"to correct a relevance decision: mavias judge export-review {relevance} --out review.yaml, keep the tags "
            f"you correct, then run this audit again with --review review.yaml {kept}")


def _biased_by_class(path: Path) -> str:
    """B' per class; a pair relied on within its class only is marked, with what to check, on a line of its own."""
    from mavias.core.evaluate.shortcuts import carries_over
    from mavias.ops.reporting.shortcut_view import WITHIN_ONLY, WITHIN_ONLY_LEGEND
    from mavias.utils.csvfile import read_csv

    table = read_csv(path, keep_default_na=False)
    if table.empty:
        return "none"
    carried = carries_over(table)
    table["shown"] = table["tag"].where(carried, table["tag"] + f" ({WITHIN_ONLY})")
    listed = "; ".join(f"{name}: {', '.join(rows['shown'])}" for name, rows in table.groupby("class", sort=True))
    if carried.all():
        return listed
    return f"{listed}\n{WITHIN_ONLY_LEGEND}"
