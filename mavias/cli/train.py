"""`mavias train` and `mavias evaluate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mavias.cli.options import (
    ConfigFile,
    GroupAttrs,
    Manifest,
    MinSupport,
    Overrides,
    Preset,
    Relevance,
    Tags,
    Workspace,
    command_line,
    console,
    parse_overrides,
    prepare_data,
    run_checkpoint,
    warn,
    writable,
)
from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.manifest import load_manifest, read_dataset_info, small_class_warnings
from mavias.core.manifest.checks import require_trainable
from mavias.core.train.config import load_config


def train(
    manifest: Manifest,
    relevance: Relevance,
    out: Annotated[Path, typer.Option("--out", help="run folder (resumes if it holds a checkpoint)",
                                                callback=writable)],
    config: ConfigFile = None,
    preset: Preset = None,
    set_: Overrides = [],
    tags: Tags = None,
    reference: Annotated[Path | None, typer.Option("--reference", help="ERM reference run folder (for selection val_tag_wg)")] = None,
    group_attrs: GroupAttrs = "",
    workspace: Workspace = Path(".mavias"),
    nproc: Annotated[int, typer.Option("--nproc", help="processes, data-parallel (DDP via torch.distributed.run): "
                                       "one per GPU with NCCL, or CPU processes with gloo")] = 1,
    min_support: MinSupport = MIN_SUPPORT,
) -> None:
    """Train one model (`--set method=`: mavias, erm, groupdro, jtt, lff, sd, flac or debian); writes checkpoints,
    metrics.csv and TensorBoard logs."""
    from mavias.core.devices import choose_device
    from mavias.core.protocol import (
        BIASED_TAGS_FILE,
        empty_reason,
        load_reference,
        reference_checkpoint,
        require_reference_for_selection,
        train_method,
    )
    from mavias.core.train.distributed import check_supported
    from mavias.core.train.model import weights_file

    cfg = load_config(config, preset=preset, overrides=parse_overrides(set_))
    check_supported(cfg, nproc)
    choose_device(cfg.device)  # a device this machine lacks fails now, not after the images are loaded
    require_reference_for_selection(cfg, reference)
    weights_file(cfg.backbone)  # a missing pretrained file fails now, not after the data is prepared
    if reference is not None:
        reference_checkpoint(reference)
    loaded = load_manifest(manifest, check_files=False)
    require_trainable(loaded, manifest)  # before any decoding or encoding
    warn(small_class_warnings(loaded))
    data = prepare_data(manifest, relevance, tags, workspace, cfg, group_attrs, out)
    ref = None if reference is None else load_reference(reference, data, min_support=min_support)
    result = train_method(data, cfg, out, ref, nproc=nproc)  # its warnings are logged (shown by the root command)
    if cfg.method == "erm" and reference is None:  # any ERM run is a reference: its B' is computed now
        found = load_reference(out, data, min_support=min_support)
        console.print(f"[green]ERM reference trained[/]: {len(found.biased_tags)} biased tag(s) in "
                      f"{out / BIASED_TAGS_FILE}")
        warn([f"B' is empty: {reason}" for reason in [empty_reason(found, data, min_support=min_support)] if reason])
    console.print(f"best checkpoints: {json.dumps(result.best)}\n"
                  f"next: {command_line('mavias', 'evaluate', '--run', out, '--manifest', manifest)} ...")


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
    out: Annotated[Path | None, typer.Option("--out", help="output folder; default RUN/eval-SPLIT-CRITERION",
                                                       callback=writable)] = None,
    min_support: MinSupport = MIN_SUPPORT,
) -> None:
    """Evaluate a run: the label-free (open-set) worst group under the reference's B', the closed-set one beside it
    where group attributes exist (--group-attrs or dataset.json), UrbanCars-style gaps, and the CelebA / ImageNet-9
    metrics when the manifest's dataset.json declares that protocol."""
    from mavias.core.protocol import (
        empty_reason,
        evaluate_checkpoint,
        load_reference,
        reference_checkpoint,
        write_run_evaluation,
    )

    dataset = read_dataset_info(manifest)
    split = split or ("test" if dataset is None or not dataset.eval_splits else dataset.eval_splits[0])
    checkpoint = run_checkpoint(run, criterion)
    if reference is not None:
        reference_checkpoint(reference)
    cfg = load_config(run / "config.yaml")
    out = out or run / f"eval-{split}-{checkpoint.stem.removeprefix('best_')}"
    group_attrs = group_attrs or ",".join(dataset.group_attrs if dataset else [])
    data = prepare_data(manifest, relevance, tags, workspace, cfg, group_attrs, out)
    if reference is None and cfg.method == "erm":
        reference = run
        console.print("label-free groups from the run itself (an ERM run) as the reference; --reference chooses another")
    elif reference is None:
        console.print("[yellow]no --reference: without an ERM reference's biased tags there are no label-free "
                      "(open-set) groups; pass --reference ERM_RUN (any `mavias train --set method=erm` run)[/]")
    ref = None if reference is None else load_reference(reference, data, min_support=min_support)
    result = evaluate_checkpoint(data, checkpoint, ref, split=split, min_support=min_support,
                                 closed_set_attrs=[a for a in group_attrs.split(",") if a], dataset=dataset)
    write_run_evaluation(out, result)
    print_summary(result)
    if ref is not None:
        warn([f"B' is empty, so the open-set groups are whole classes and cannot show a shortcut: {reason}"
              for reason in [empty_reason(ref, data, min_support=min_support)] if reason])
    console.print(f"wrote {out / 'metrics.json'}")


def summary_table(result: dict) -> tuple[Table, list[str]]:
    """The evaluation as a table, every figure from fewer than the minimum support flagged, and the caveats that say
    which and why."""
    from mavias.core.evaluate.explain import small_group_caveats

    table = Table(title=f"{result['split']} ({result['n_samples']} samples)")
    for col in ("protocol", "WG acc [95% CI]", "worst group", "avg acc", "weighted avg"):
        table.add_column(col)
    caveats = []
    for protocol in ("open_set", "closed_set"):
        m = result.get(protocol)
        if m:
            flag = " [bold red](too few)[/]" if m["worst_group_small"] else ""
            table.add_row(protocol, f"{m['worst_group_accuracy']:.3f} [{m['worst_group_ci_low']:.3f}, "
                          f"{m['worst_group_ci_high']:.3f}]{flag}", f"{m['worst_group']} (n={m['worst_group_n']})",
                          f"{m['average_accuracy']:.3f}{' [bold red](small groups)[/]' if m['small_groups'] else ''}",
                          "n/a" if m["weighted_average_accuracy"] is None else f"{m['weighted_average_accuracy']:.3f}")
            caveats += small_group_caveats(m, protocol.replace("_", "-"))
    return table, caveats


def print_summary(result: dict) -> None:
    table, caveats = summary_table(result)
    console.print(table)
    warn(caveats)
    if "urbancars" in result:
        console.print({k: round(v, 4) for k, v in result["urbancars"].items()})
    if "celeba" in result:
        console.print({k: round(result["celeba"][k], 4) for k in ("unbiased_accuracy", "bias_conflicting_accuracy")})
    if "imagenet9" in result:
        console.print(result["imagenet9"])
