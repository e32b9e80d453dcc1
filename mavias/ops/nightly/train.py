"""Train: the ERM reference of the open-set protocol (``train_reference_model``), then MAVias as a small settings
search: ``plan_trials`` (:mod:`~mavias.ops.nightly.trial_plan`), ``run_trial`` mapped over the planned trials (one
trial per GPU task), ``select_candidate`` (the best validation criterion).

Every training resumes from its last epoch and a finished run is reused, so a retried task repeats no work.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from mavias.core.protocol import load_reference, resolve_run, train_reference
from mavias.core.train.checkpoints import best_checkpoint
from mavias.core.tune.batch import finish_batch, run_planned_trial
from mavias.ops.nightly import warm
from mavias.ops.nightly.artifacts import Candidate, Dataset, TrainedReference, TrialJob, TrialResult
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.dataset import load_prepared
from mavias.ops.nightly.layout import layout, registry
from mavias.ops.nightly.release import version_origin
from mavias.ops.nightly.trial_plan import PREVIOUS_BEST, TUNING_DIR, base_dir, candidate_base, candidate_settings
from mavias.ops.registry import CorruptPointer
from mavias.utils.atomic import atomic_path
from mavias.utils.progress import progress_line


def train_reference_model(cfg: NightlyConfig, dataset: Dataset, *, full_retrain: bool = False) -> TrainedReference:
    """The ERM reference of the open-set protocol, warm or from scratch as :func:`warm.plan_start` decides (resumes
    from its last epoch; a finished run is reused). This GPU task also resolves the candidate's recipe
    (``tuning/base``; the range test is shared with the reference), so the planning task that follows trains
    nothing."""
    data = load_prepared(dataset)
    plan = warm.night_plan(cfg, dataset, data.classes, data["train"].frame["sample_id"],
                           production_night=_production_night(cfg), full_retrain=full_retrain)
    progress_line(warm.describe(plan))
    out = Path(dataset["dir"]) / ("reference" if plan["from_night"] is None else f"reference-warm-{plan['from_night']}")
    reference = train_reference(data, cfg.training, out, progress=True, nproc=cfg.train.nproc,  # epoch lines
                                warm=warm.warm_start(cfg, plan, "reference"))
    warm.write_train_ids(data["train"].frame["sample_id"], out)
    resolve_run(data, candidate_base(cfg, plan), base_dir(dataset))  # trial folders are keyed by the whole config
    return {"dir": str(out), "checkpoint": str(reference.checkpoint), "best": reference.run.best if reference.run else {},
            "candidate_recipe": str(base_dir(dataset)), "classes": data.classes, "start": plan}


def _production_night(cfg: NightlyConfig) -> str | None:
    """The night production's version was trained on (None: no production, or a pointer that cannot be read)."""
    try:
        current = registry(cfg, step="train_reference").production()
    except CorruptPointer:
        return None
    return None if current is None else version_origin(current.version)[0]


def run_trial(cfg: NightlyConfig, dataset: Dataset, reference: TrainedReference, job: TrialJob) -> TrialResult:
    """Train one planned trial on the accumulated data (resumable; a finished trial is reused)."""
    data = load_prepared(dataset)
    return run_planned_trial(data, load_reference(reference["dir"], data), candidate_settings(cfg, reference),
                             Path(dataset["dir"]) / TUNING_DIR, dict(job), nproc=cfg.train.nproc)


def select_candidate(cfg: NightlyConfig, dataset: Dataset, reference: TrainedReference,
                     trials: list[TrialResult]) -> Candidate:
    """The trial with the best validation criterion becomes the candidate; its settings are the next night's first
    trial."""
    base = candidate_base(cfg, reference["start"])
    selection = base.selection
    tuned = finish_batch(Path(dataset["dir"]) / TUNING_DIR, trials, base)
    with atomic_path(layout(cfg).root / TUNING_DIR / PREVIOUS_BEST) as tmp:
        tmp.write_text(json.dumps(tuned.best_params))
    summary = json.loads((tuned.best_dir / "train_summary.json").read_text())
    params = [f"params_{name}" for name in tuned.best_params]
    rows = [{"number": int(row["number"]), "value": None if pd.isna(row["value"]) else float(row["value"]),
             "state": str(row["state"]), "params": {p.removeprefix("params_"): row[p] for p in params}}
            for _, row in tuned.trials.iterrows()]
    return {"dir": str(tuned.best_dir), "checkpoint": str(best_checkpoint(tuned.best_dir, selection)),
            "best": summary["best"], "method": "mavias", "selection": selection,
            "tuning": {"chosen": tuned.best_params, "value": tuned.best_value, "fallback": tuned.selection_fallback,
                       "trials": json.loads(json.dumps(rows, default=float))}}
