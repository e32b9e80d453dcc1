"""Batch (ask-and-tell) search for a scheduler: trials are planned in one task, trained in parallel mapped tasks
(one trial each, on GPU workers, no Optuna or database access there), and told back to the study in one task.

Batch TPE cannot prune or learn within a batch; it learns across nights when the study folder is kept.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from mavias.core import protocol  # its names load on first use: planning a batch imports no torch
from mavias.core.train.config import TrainConfig
from mavias.core.train.sanity import TrainingDiverged, divergence
from mavias.core.tune.search import START_ATTR, TuneResult, all_diverged, open_study, trial_dir, write_outcome
from mavias.core.tune.space import search_space, suggest_config

if TYPE_CHECKING:
    from mavias.core.protocol import Reference
    from mavias.core.train.prepare import PreparedData

log = logging.getLogger(__name__)

BATCH_ATTR = "batch"


def plan_batch(study_dir: Path, base: TrainConfig, n_trials: int, *, batch: str,
               warm_start: dict | None = None) -> list[dict]:
    """Ask ``n_trials`` trials (the warm start first); a second call for the same ``batch`` returns the same jobs, and
    one after a call killed part-way asks only the trials it left."""
    study = open_study(study_dir, requeue_stale=False)
    for orphan in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if BATCH_ATTR not in orphan.user_attrs:  # asked by a planner killed before it marked it: never trained
            study.tell(orphan.number, state=TrialState.FAIL)
    planned = _planned(study, batch)
    if not planned and warm_start and not _queued(study, warm_start):
        study.enqueue_trial(warm_start, user_attrs={START_ATTR: True})
    for _ in range(n_trials - len(planned)):
        trial = study.ask()
        trial.set_user_attr("run_dir", str(trial_dir(study_dir, suggest_config(trial, base, search_space(base)))))
        trial.set_user_attr(BATCH_ATTR, batch)  # last: a trial of the batch is one whose plan is complete
    return [{"number": t.number, "params": t.params} for t in _planned(study, batch)]


def _planned(study: optuna.Study, batch: str) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(BATCH_ATTR) == batch]


def _queued(study: optuna.Study, params: dict) -> bool:
    return any(t.system_attrs.get("fixed_params") == params
               for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def run_planned_trial(data: PreparedData, reference: Reference, base: TrainConfig, study_dir: Path,
                      job: dict, *, nproc: int = 1) -> dict:
    """Train one planned trial to the end (resumable; over ``nproc`` processes) and return its criterion score (None,
    with why, for a trial that diverged: a searched rate too high for this data stops the trial, not the batch)."""
    cfg = suggest_config(optuna.trial.FixedTrial(job["params"]), base, search_space(base))
    try:
        run = protocol.train_method(data, cfg, trial_dir(study_dir, cfg), reference, progress=True, nproc=nproc)
    except TrainingDiverged as diverged:
        what = divergence(diverged)
        log.warning("trial %d stopped: %s", job["number"], what)
        return {"number": job["number"], "value": None, "diverged": what}
    return {"number": job["number"], "value": run.best[cfg.selection]["score"]}


def finish_batch(study_dir: Path, results: list[dict], base: TrainConfig) -> TuneResult:
    """Tell the study every trial's score and write ``best/`` and ``trials.csv`` (idempotent)."""
    study = open_study(study_dir, requeue_stale=False)
    for result in results:
        if result["value"] is None:
            study.tell(result["number"], state=TrialState.PRUNED, skip_if_finished=True)
        else:
            study.tell(result["number"], result["value"], skip_if_finished=True)
    diverged = [result for result in results if result["value"] is None]
    if diverged and not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise all_diverged(study_dir, len(diverged))
    return write_outcome(study, study_dir, base)
