"""The night's settings search plan (``plan_trials``): the candidate's settings as the reference's task resolved
them, the previous night's best first, then Optuna's TPE picks. Reads run folders and the study without torch."""

from __future__ import annotations

import json
from pathlib import Path

from mavias.core.train.config import TrainConfig
from mavias.core.train.recipe_file import read_recipe_record
from mavias.core.tune.batch import plan_batch
from mavias.core.tune.search import BASE_DIR
from mavias.core.tune.space import current_values, search_space
from mavias.errors import ExplainedFailure
from mavias.ops.nightly import warm
from mavias.ops.nightly.artifacts import Dataset, StartPlan, TrainedReference, TrialJob
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import layout

TUNING_DIR = "tuning"
PREVIOUS_BEST = "best_params.json"


def candidate_base(cfg: NightlyConfig, plan: StartPlan) -> TrainConfig:
    """The candidate's settings as configured, warm-started when tonight's plan says so (the recipe unresolved)."""
    base = cfg.training.model_copy(update={"method": "mavias"})
    start = warm.warm_start(cfg, plan, "candidate")
    return base if start is None else start.apply(base)


def base_dir(dataset: Dataset) -> Path:
    """Where the candidate's recipe is resolved for tonight's data (``train_reference`` does it)."""
    return Path(dataset["dir"]) / TUNING_DIR / BASE_DIR


def candidate_settings(cfg: NightlyConfig, reference: TrainedReference) -> TrainConfig:
    """The candidate's settings with the recipe's choices for tonight's data, as ``train_reference`` resolved them."""
    folder = Path(reference["candidate_recipe"])
    record = read_recipe_record(folder, candidate_base(cfg, reference["start"]).model_dump(mode="json"))
    if record is None:
        raise ExplainedFailure(f"the candidate's training recipe is not resolved for tonight's settings ({folder}): "
                               "the train_reference task resolves it; clear that task")
    return TrainConfig.model_validate(record["resolved"])


def plan_trials(cfg: NightlyConfig, dataset: Dataset, reference: TrainedReference) -> list[TrialJob]:
    """Tonight's trials: one trial is exactly the configured settings; with more, the previous night's best settings
    (those still inside tonight's search space; else the configured ones) come first, then TPE's picks."""
    base = candidate_settings(cfg, reference)
    space = {param.key: param for param in search_space(base)}
    previous = layout(cfg).root / TUNING_DIR / PREVIOUS_BEST
    first = current_values(base, list(space.values()))
    if cfg.train.tune_trials > 1 and previous.exists():
        best = json.loads(previous.read_text())
        first |= {key: value for key, value in best.items() if key in space and space[key].contains(value)}
    return plan_batch(Path(dataset["dir"]) / TUNING_DIR, base, cfg.train.tune_trials, batch=dataset["night"],
                      warm_start=first)
