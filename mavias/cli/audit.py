"""`mavias audit PATH --out DIR`: your own images audited in one command (:mod:`mavias.audit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.discover import LlmModel
from mavias.cli.judge import BaseUrl, JudgeKind
from mavias.cli.tag import AllowDownload, Model, Pretrained, Threshold, TopK, VocabularyPath, WeightsDir
from mavias.cli.train import MinSupport, _overrides, console, summary_table, warn
from mavias.encode.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.evaluate.metrics import MIN_SUPPORT
from mavias.tagging.defaults import TAG_THRESHOLD, TAG_TOP_K


def audit_command(
    path: Annotated[Path, typer.Argument(help="a folder of images (<class>/ sub-folders, or train/ val/ test/ above "
                                              "them), a published dataset's folder, or a manifest")],
    out: Annotated[Path, typer.Option("--out", help="audit folder (resumes an audit of the same inputs)")],
    tags: Annotated[Path | None, typer.Option("--tags", help="tags sidecar: CSV image,tags ('a;b', image relative to "
                                                             "PATH) or Parquet with a list column tags")] = None,
    min_support: MinSupport = MIN_SUPPORT,
    layout: Annotated[str, typer.Option(help="auto, imagefolder, waterbirds, celeba, urbancars or manifest")] = "auto",
    model: Model = OPENCLIP_MODEL,
    pretrained: Pretrained = OPENCLIP_PRETRAINED,
    vocabulary: VocabularyPath = None,
    threshold: Threshold = TAG_THRESHOLD,
    top_k: TopK = TAG_TOP_K,
    weights_dir: WeightsDir = None,
    allow_download: AllowDownload = False,
    allow_random_tags: Annotated[bool, typer.Option(help="tag with random weights (--pretrained none) although the "
                                                         "tags are noise")] = False,
    judge: JudgeKind = "offline",
    base_url: BaseUrl = "https://api.openai.com/v1",
    llm_model: LlmModel = "gpt-4o",
    config: Annotated[Path | None, typer.Option("--config", help="YAML training config (default: the recipe)")] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="paper preset")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="training override of both runs, e.g. --set epochs=20")] = [],
    gates: Annotated[Path | None, typer.Option("--gates", help="quality-gate YAML (default: the shipped one)")] = None,
    device: Annotated[str, typer.Option(help="auto (GPU when present), cpu, cuda")] = "auto",
    name: Annotated[str | None, typer.Option(help="the model's name (default: the data folder's)")] = None,
) -> None:
    """Audit your own images in one command: import, tag, judge, ERM reference, MAVias, evaluate, export and the HTML
    report, resumably."""
    from mavias.audit import AuditOptions, TaggerSettings, run_audit

    tagger = TaggerSettings(model, pretrained, vocabulary, threshold, top_k, weights_dir, allow_download,
                            allow_random_tags)
    result = run_audit(AuditOptions(path, out, tags, layout, min_support, tagger, judge, base_url, llm_model, config,
                                    preset, _overrides(set_), gates, device, name))
    table, _ = summary_table(result.evaluation)
    console.print(table)
    warn(result.caveats)
    console.print(f"biased tags (B'): {_biased_by_class(result.biased_tags)}; every (class, tag) pair tested, with "
                  f"why it is or is not in B': {result.evidence}", soft_wrap=True)
    console.print(f"quality gates: {'passed' if result.gates_passed else 'FAILED (see the report)'}\n"
                  f"report: {result.report}\nmodel: {result.model} (serve it: mavias serve --model-dir "
                  f"{result.model.parent})", soft_wrap=True)


def _biased_by_class(path: Path) -> str:
    import pandas as pd

    table = pd.read_csv(path, keep_default_na=False)
    if table.empty:
        return "none"
    return "; ".join(f"{name}: {', '.join(rows['tag'])}" for name, rows in table.groupby("class", sort=True))
