"""`mavias train` and `mavias evaluate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
import yaml
from rich.table import Table

from mavias.discover import Workspace as DiscoveryWorkspace
from mavias.manifest import read_dataset_info
from mavias.relevance import load_relevance
from mavias.train.config import TrainConfig, load_config, preset_names
from mavias.train.encoder import encoder_from_spec
from mavias.train.model import weights_file
from mavias.train.prepare import PreparedData, prepare_image_data
from mavias.utils.console import make_console

console = make_console()

Manifest = Annotated[Path, typer.Option("--manifest", help="dataset manifest (.parquet or .csv)", exists=True)]
Relevance = Annotated[Path, typer.Option("--relevance", help="relevance table (class, tag, relevant, source)", exists=True)]
Tags = Annotated[Path | None, typer.Option("--tags", help="tags table from `mavias tag`; default: the manifest's tags")]
Workspace = Annotated[Path, typer.Option("--workspace", help="cache folder for bias embeddings")]
GroupAttrs = Annotated[str, typer.Option("--group-attrs", help="comma-separated attr_* columns forming true groups")]


def _prepare(manifest: Path, relevance: Path, tags: Path | None, workspace: Path, cfg: TrainConfig, group_attrs: str,
             out: Path) -> PreparedData:
    encoder = encoder_from_spec(cfg.encoder)
    return prepare_image_data(
        manifest,
        relevance=load_relevance(relevance),
        tags_table=None if tags is None else pd.read_parquet(tags),
        encoder=encoder,
        store_dir=DiscoveryWorkspace(workspace).embeddings(encoder.encoder_id),
        config=cfg,
        group_attrs=[a for a in group_attrs.split(",") if a],
        quarantine_csv=out / "quarantine.csv",
    )


def _overrides(values: list[str]) -> dict:
    pairs = {}
    for item in values:
        if "=" not in item:
            raise typer.BadParameter(f"--set takes key=value, got {item!r}")
        key, value = item.split("=", 1)
        pairs[key] = yaml.safe_load(value)
    return pairs


def train(
    manifest: Manifest,
    relevance: Relevance,
    out: Annotated[Path, typer.Option("--out", help="run folder (resumes if it holds a checkpoint)")],
    config: Annotated[Path | None, typer.Option("--config", help="YAML training config")] = None,
    preset: Annotated[str | None, typer.Option("--preset", help=f"paper preset: {', '.join(preset_names())}")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="override, e.g. --set mavias.lam=0.4")] = [],
    tags: Tags = None,
    reference: Annotated[Path | None, typer.Option("--reference", help="ERM reference run folder (for selection val_tag_wg)")] = None,
    group_attrs: GroupAttrs = "",
    workspace: Workspace = Path(".mavias"),
) -> None:
    """Train one model (`--set method=`: mavias, erm, groupdro, jtt, lff, sd, flac or debian); writes checkpoints,
    metrics.csv and TensorBoard logs."""
    from mavias.workflow import BIASED_TAGS_FILE, load_reference, train_method

    cfg = load_config(config, preset=preset, overrides=_overrides(set_))
    weights_file(cfg.backbone)  # a missing pretrained file fails now, not after the data is prepared
    data = _prepare(manifest, relevance, tags, workspace, cfg, group_attrs, out)
    ref = None if reference is None else load_reference(reference, data)
    result = train_method(data, cfg, out, ref)
    for warning in result.warnings:
        console.print(f"[bold red]warning:[/] {warning}")
    if cfg.method == "erm" and reference is None:  # any ERM run is a reference: its B' is computed now
        found = load_reference(out, data).biased_tags
        console.print(f"[green]ERM reference trained[/]: {len(found)} biased tag(s) in {out / BIASED_TAGS_FILE}")
    console.print(f"best checkpoints: {json.dumps(result.best)}\nnext: mavias evaluate --run {out} --manifest {manifest} ...")


def evaluate(
    run: Annotated[Path, typer.Option("--run", help="run folder from `mavias train`", exists=True)],
    manifest: Manifest,
    relevance: Relevance,
    reference: Annotated[Path | None, typer.Option(
        "--reference", help="ERM reference run: its biased tags B' form the label-free (open-set) groups; default: "
        "the run itself when it is an ERM run")] = None,
    criterion: Annotated[str | None, typer.Option("--criterion", help="val_acc, val_tag_wg or val_robust; default: the run's selection")] = None,
    split: Annotated[str | None, typer.Option("--split", help="default: test, else the first evaluation split of dataset.json")] = None,
    tags: Tags = None,
    group_attrs: GroupAttrs = "",
    workspace: Workspace = Path(".mavias"),
    out: Annotated[Path | None, typer.Option("--out", help="output folder; default RUN/eval-SPLIT-CRITERION")] = None,
) -> None:
    """Evaluate a run: the label-free (open-set) worst group under the reference's B', the closed-set one beside it
    where group attributes exist (--group-attrs or dataset.json), UrbanCars-style gaps, and the CelebA / ImageNet-9
    metrics when the manifest's dataset.json declares that protocol."""
    from mavias.train.trainer import run_checkpoint
    from mavias.workflow import (
        evaluate_checkpoint,
        load_reference,
        write_run_evaluation,
    )

    dataset = read_dataset_info(manifest)
    split = split or ("test" if dataset is None or not dataset.eval_splits else dataset.eval_splits[0])
    checkpoint = run_checkpoint(run, criterion)
    cfg = load_config(run / "config.yaml")
    out = out or run / f"eval-{split}-{checkpoint.stem.removeprefix('best_')}"
    group_attrs = group_attrs or ",".join(dataset.group_attrs if dataset else [])
    data = _prepare(manifest, relevance, tags, workspace, cfg, group_attrs, out)
    if reference is None and cfg.method == "erm":
        reference = run
        console.print("label-free groups from the run itself (an ERM run) as the reference; --reference chooses another")
    elif reference is None:
        console.print("[yellow]no --reference: without an ERM reference's biased tags there are no label-free "
                      "(open-set) groups; pass --reference ERM_RUN (any `mavias train --set method=erm` run)[/]")
    ref = None if reference is None else load_reference(reference, data)
    result = evaluate_checkpoint(data, checkpoint, ref, split=split,
                                 closed_set_attrs=[a for a in group_attrs.split(",") if a], dataset=dataset)
    write_run_evaluation(out, result)
    _print_summary(result)
    console.print(f"wrote {out / 'metrics.json'}")


def _print_summary(result: dict) -> None:
    table = Table(title=f"{result['split']} ({result['n_samples']} samples)")
    for col in ("protocol", "WG acc [95% CI]", "avg acc", "weighted avg"):
        table.add_column(col)
    for protocol in ("open_set", "closed_set"):
        m = result.get(protocol)
        if m:
            table.add_row(protocol, f"{m['worst_group_accuracy']:.3f} [{m['worst_group_ci_low']:.3f}, {m['worst_group_ci_high']:.3f}]",
                          f"{m['average_accuracy']:.3f}", f"{m['weighted_average_accuracy'] or float('nan'):.3f}")
    console.print(table)
    if "urbancars" in result:
        console.print({k: round(v, 4) for k, v in result["urbancars"].items()})
    if "celeba" in result:
        console.print({k: round(result["celeba"][k], 4) for k in ("unbiased_accuracy", "bias_conflicting_accuracy")})
    if "imagenet9" in result:
        console.print(result["imagenet9"])
