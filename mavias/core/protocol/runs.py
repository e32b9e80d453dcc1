"""Training runs as the paper's protocols prescribe: the recipe resolved first (an explicit step, run where the
training runs), then the ERM reference (selected by validation accuracy) or any method (every criterion's checkpoint
kept, selected without bias labels); one process, or data-parallel over several."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import pandas as pd

from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.evaluate.shortcuts import SHORTCUT
from mavias.core.protocol.crossfit import CROSSFIT_DIR, cross_fit, needs_cross_fit
from mavias.core.protocol.reference import Reference, load_reference
from mavias.core.train.checkpoints import EARLY_CHECKPOINT
from mavias.core.train.config import TrainConfig
from mavias.core.train.distributed import fit_distributed
from mavias.core.train.failures import explained_training_errors
from mavias.core.train.prepare import PreparedData
from mavias.core.train.recipe import ResolvedRecipe, resolve_recipe
from mavias.core.train.trainer import Trainer, TrainResult
from mavias.core.train.warm import WarmStart
from mavias.errors import UserError
from mavias.utils.atomic import atomic_path


def resolve_run(data: PreparedData, cfg: TrainConfig, out_dir: str | Path) -> ResolvedRecipe:
    """The recipe of a run folder for this data, written there (``config.yaml``, ``recipe.json``): a folder that
    resolved the same request before keeps its choices, and the range test is cached. An error is one readable line
    (:class:`~mavias.core.train.failures.TrainingFailed`)."""
    out_dir = Path(out_dir)
    with explained_training_errors(cfg.method, out_dir, lambda: 0):
        recipe = resolve_recipe(cfg, data["train"], len(data.classes), run_dir=out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recipe.write(out_dir)
    return recipe


def train_reference(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, *, tag_min_support: int = MIN_SUPPORT,
                    rule: str = SHORTCUT, progress: bool = True, keep_epochs: bool = False, nproc: int = 1,
                    warm: WarmStart | None = None) -> Reference:
    """The ERM reference (from ``warm``'s model for its share of the steps, when given); with ``keep_epochs`` it keeps
    every epoch's model (for the benches' analyses). When the validation split cannot decide whether it leans on an
    associated tag, it is cross-fitted on the training split (:mod:`~mavias.core.protocol.crossfit`), always from
    scratch: a fold model must never have seen the fold it predicts."""
    erm = cfg.model_copy(update={"method": "erm", "selection": "val_acc"})
    recipe = resolve_run(data, erm if warm is None else warm.apply(erm), out_dir)
    run = _fit(data, recipe, out_dir, nproc=nproc, progress=progress, keep_epochs=keep_epochs)
    if warm is not None and warm.proxy is not None:
        _keep_proxy(warm.proxy, Path(out_dir) / EARLY_CHECKPOINT)
    reference = load_reference(out_dir, data, rule=rule, min_support=tag_min_support, run=run)
    if rule == SHORTCUT and needs_cross_fit(reference.evidence, Path(out_dir), data["train"]):
        def fit(fitted: PreparedData, run_dir: Path) -> TrainResult:  # the cold recipe kept where a retry finds it
            cold = recipe if warm is None else resolve_run(data, erm, Path(out_dir) / CROSSFIT_DIR)
            return _fit(fitted, cold, run_dir, nproc=nproc, progress=progress)

        cross_fit(data, fit, recipe.config.seed, Path(out_dir), progress=progress)
        reference = load_reference(out_dir, data, rule=rule, min_support=tag_min_support, run=run)
    return reference


def _keep_proxy(proxy: Path, early: Path) -> None:
    """A warm run's first epochs start from a trained model, so its ``early.pt`` leans on shortcuts no more than the
    model does: it keeps the proxy of the lineage's cold run instead (which never trained on a validation image
    either); unchanged on a rerun, so B' is not recomputed."""
    if proxy.is_file() and not (early.is_file() and filecmp.cmp(proxy, early, shallow=False)):
        with atomic_path(early) as tmp:
            shutil.copyfile(proxy, tmp)


def require_reference_for_selection(cfg: TrainConfig, reference: object | None) -> None:
    if cfg.selection == "val_tag_wg" and reference is None:
        raise UserError("selection val_tag_wg needs the ERM reference for its tag-derived groups",
                        hint="pass --reference ERM_RUN (a `mavias train --set method=erm` run), or another selection")


def train_method(data: PreparedData, cfg: TrainConfig, out_dir: str | Path, reference: Reference | None,
                 *, progress: bool = True, stop_after: int | None = None, nproc: int = 1) -> TrainResult:
    """Train one run; with ``nproc`` > 1 data-parallel over that many processes (:mod:`mavias.core.train.distributed`)."""
    require_reference_for_selection(cfg, reference)
    if cfg.selection == "val_true_wg" and data["val"].groups is None:
        raise UserError("selection val_true_wg needs the true groups of the validation split",
                        hint="give the group attributes (--group-attrs), or another selection")
    val_groups = None if reference is None else reference.val_groups
    return _fit(data, resolve_run(data, cfg, out_dir), out_dir, nproc=nproc, progress=progress, val_groups=val_groups,
                stop_after=stop_after, reference=None if reference is None else Path(reference.checkpoint))


def _fit(data: PreparedData, recipe: ResolvedRecipe, out_dir: str | Path, *, nproc: int, progress: bool,
         keep_epochs: bool = False, val_groups: pd.Series | None = None, stop_after: int | None = None,
         reference: Path | None = None) -> TrainResult:
    """One training of ``recipe``: in this process, or data-parallel over ``nproc`` processes."""
    if nproc > 1:
        return fit_distributed(data, recipe, out_dir, nproc, val_groups=val_groups, keep_epochs=keep_epochs,
                               stop_after=stop_after)
    return Trainer(recipe, data["train"], data["val"], data.classes, out_dir, val_groups=val_groups, progress=progress,
                   keep_epochs=keep_epochs, reference=reference).fit(stop_after=stop_after)
