"""`mavias tune`: search a method's settings on validation, write the best run as a normal run folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

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
    writable,
)
from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.train.config import load_config


def tune_command(
    manifest: Manifest,
    relevance: Relevance,
    out: Annotated[Path, typer.Option("--out", help="search folder (study.db, trials/, trials.csv, best/); resumes",
                                                callback=writable)],
    reference: Annotated[Path | None, typer.Option(
        "--reference", help="ERM reference run folder: its biased tags B' form the validation groups of the criterion "
        "(without it the criterion is the balanced validation accuracy)", exists=True)] = None,
    trials: Annotated[int, typer.Option(
        "--trials", help="trials to finish in all (resumed ones count; at least 2)")] = 12,
    timeout: Annotated[float | None, typer.Option("--timeout", min=1,
                                                  help="stop starting trials after this many seconds")] = None,
    config: ConfigFile = None,
    preset: Preset = None,
    set_: Overrides = [],
    warm_start: Annotated[Path | None, typer.Option("--warm-start", help="JSON of settings to try first (a previous best); default: the base settings")] = None,
    seed: Annotated[int, typer.Option(help="sampler seed")] = 0,
    tags: Tags = None,
    group_attrs: GroupAttrs = "",
    workspace: Workspace = Path(".mavias"),
    min_support: MinSupport = MIN_SUPPORT,
) -> None:
    """Search the learning rate (two decades around the recipe's), the epochs and the method's own settings
    (`--set method=...`, default mavias) with Optuna TPE and median pruning, selecting by the bias-unaware validation
    criterion only."""
    from mavias.core.manifest import load_manifest
    from mavias.core.manifest.checks import require_trainable
    from mavias.core.protocol import load_reference, reference_checkpoint, require_reference_for_selection
    from mavias.core.tune.search import check_same_search, check_trials, load_warm_start, search_requests, tune

    check_trials(trials)
    base = load_config(config, preset=preset, overrides=parse_overrides(set_))
    require_reference_for_selection(base, reference)
    if warm_start is not None:  # what can be checked before any data is prepared
        load_warm_start(warm_start, base)
    checkpoint = None if reference is None else reference_checkpoint(reference)
    loaded = load_manifest(manifest, check_files=False)
    require_trainable(loaded, manifest)
    request, older = search_requests(base, loaded, [path for path in (relevance, tags, checkpoint) if path is not None])
    check_same_search(out, request, older)  # before the data is prepared into that folder
    data = prepare_data(manifest, relevance, tags, workspace, base, group_attrs, out)
    ref = None if reference is None else load_reference(reference, data, min_support=min_support)
    result = tune(data, ref, base, out, trials=trials, timeout=timeout, warm_start=warm_start, seed=seed, progress=True,
                  request=request, also=(older,))
    console.print(f"best: {result.choice(base.selection)}: {json.dumps(result.best_params)}")
    if result.selection_fallback:
        console.print(f"[yellow]{base.selection} was constant over epochs; the checkpoint is {result.selection_fallback}'s[/]")
    evaluate = command_line("mavias", "evaluate", "--run", result.best_dir, "--manifest", manifest)
    console.print(f"trials: {out / 'trials.csv'}; pruning: the trials cost {result.cost_ratio:.0%} of as many full "
                  f"trainings\nnext: {evaluate} ...")
