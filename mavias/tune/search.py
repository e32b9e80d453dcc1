"""Hyperparameter search for MAVias with Optuna: TPE sampling, median pruning per epoch, resumable SQLite study.

Trials are scored only by the run's bias-unaware selection criterion (``cfg.selection``, default ``val_robust``) on
the validation split; the test split is never read. A trial's run folder is named by its settings, so a trial cut
off mid-training resumes from its last checkpoint when the search is started again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import optuna
import pandas as pd

from mavias.errors import UserError
from mavias.train.config import TrainConfig
from mavias.train.prepare import PreparedData
from mavias.utils.atomic import atomic_path, write_json
from mavias.workflow import Reference, train_method

STUDY_NAME = "mavias"
STORAGE_FILE = "study.db"
TRIALS_FILE = "trials.csv"
BEST_DIR = "best"
TUNE_SUMMARY = "tune.json"
# Ranges around the paper's four presets (alpha 0.001-0.05, lambda 0.4-0.7), not fitted to any benchmark.
ALPHA_RANGE = (1e-3, 0.1)
LAM_RANGE = (0.3, 0.8)
PROJECTION_LR_MULT_RANGE = (0.5, 10.0)
LR_FACTOR_RANGE = (1 / 3, 3.0)


@dataclass
class TuneResult:
    best_dir: Path
    best_params: dict
    best_value: float
    trials: pd.DataFrame
    selection_fallback: str | None


def search_ranges(base: TrainConfig) -> dict[str, tuple[float, float]]:
    """The searched settings and their (low, high) bounds around ``base``."""
    return {"alpha": ALPHA_RANGE, "lam": LAM_RANGE, "projection_lr_mult": PROJECTION_LR_MULT_RANGE,
            "lr": (base.optim.lr * LR_FACTOR_RANGE[0], base.optim.lr * LR_FACTOR_RANGE[1]),
            "epochs": (max(1, base.epochs // 2), base.epochs)}


def suggest_config(trial: optuna.Trial, base: TrainConfig) -> TrainConfig:
    """The trial's MAVias config: alpha, lambda, projection lr multiplier, learning rate and epochs."""
    ranges = search_ranges(base)
    mavias = base.mavias.model_copy(update={
        "alpha": trial.suggest_float("alpha", *ranges["alpha"], log=True),
        "lam": trial.suggest_float("lam", *ranges["lam"]),
        "projection_lr_mult": trial.suggest_float("projection_lr_mult", *ranges["projection_lr_mult"], log=True),
    })
    lr = trial.suggest_float("lr", *ranges["lr"], log=True)
    epochs = trial.suggest_int("epochs", *map(int, ranges["epochs"]))
    return base.model_copy(update={"method": "mavias", "mavias": mavias, "optim": base.optim.model_copy(update={"lr": lr}),
                                   "epochs": epochs})


def load_warm_start(path: Path, base: TrainConfig) -> dict:
    """The settings of ``path`` (JSON, e.g. a previous search's ``best/tune.json`` ``params``), checked against the
    search ranges; a :class:`UserError` saying what to fix otherwise."""
    ranges = search_ranges(base)
    try:
        params = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"--warm-start {path}: cannot read it as JSON ({err}); give a JSON object such as "
                        '{"alpha": 0.01, "lam": 0.5}') from None
    if not isinstance(params, dict) or not params:
        raise UserError(f"--warm-start {path}: expected a JSON object of settings ({', '.join(ranges)})")
    if unknown := sorted(set(params) - set(ranges)):
        raise UserError(f"--warm-start {path}: unknown setting(s) {', '.join(unknown)}; searched: {', '.join(ranges)}")
    for name, value in params.items():
        low, high = ranges[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise UserError(f"--warm-start {path}: {name} = {value!r} is outside the searched range [{low:g}, {high:g}]")
    return params


def settings_params(cfg: TrainConfig) -> dict:
    """A config's values of the searched settings (to warm-start a search with them)."""
    m = cfg.mavias
    return {"alpha": m.alpha, "lam": m.lam, "projection_lr_mult": m.projection_lr_mult, "lr": cfg.optim.lr,
            "epochs": cfg.epochs}


def trial_dir(out_dir: Path, cfg: TrainConfig) -> Path:
    digest = hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:12]
    return out_dir / "trials" / digest


def run_trial(trial: optuna.Trial, data: PreparedData, reference: Reference, base: TrainConfig, out_dir: Path,
              progress: bool = False) -> float:
    """Train one configuration epoch by epoch, reporting the best criterion so far so the pruner can stop it."""
    cfg = suggest_config(trial, base)
    run_dir = trial_dir(out_dir, cfg)
    trial.set_user_attr("run_dir", str(run_dir))
    while True:
        result = train_method(data, cfg, run_dir, reference, progress=progress, stop_after=1)
        score = result.best[cfg.selection]["score"]
        trial.report(score, step=len(result.history))
        if result.completed:
            return score
        if trial.should_prune():
            raise optuna.TrialPruned()


def startup_trials(trials: int) -> int:
    """Random trials before TPE models the results: half the budget, at most Optuna's default of 10, so a small
    budget still gets some guided trials."""
    return max(2, min(10, trials // 2))


def pruning_warmup(epochs: int) -> int:
    """Epochs a trial always trains before the pruner may stop it: the first half. Settings that debias start
    slower (a faster projection layer takes the shortcut away from the main model first), and pruning on early
    epochs stopped exactly those."""
    return max(1, epochs // 2)


def open_study(out_dir: Path, seed: int = 0, *, requeue_stale: bool = True, n_startup: int = 10,
               prune_after: int = 2) -> optuna.Study:
    """Create or reopen the study in ``out_dir``; with ``requeue_stale`` (one search process at a time) trials left
    RUNNING by a killed search are marked failed and queued again with the same settings. A trial below the median
    of the finished ones may be pruned only after ``prune_after`` epochs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=STUDY_NAME,
        storage=f"sqlite:///{out_dir / STORAGE_FILE}",
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=prune_after),
        load_if_exists=True,
    )
    if requeue_stale:
        for stale in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
            study.tell(stale.number, state=optuna.trial.TrialState.FAIL)
            if stale.params:  # a trial killed before it sampled its settings has nothing to repeat
                study.enqueue_trial(stale.params)
    return study


def finished_trials(study: optuna.Study) -> int:
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=done))


def tune(data: PreparedData, reference: Reference, base: TrainConfig, out_dir: str | Path, *, trials: int,
         timeout: float | None = None, warm_start: dict | None = None, seed: int = 0,
         progress: bool = False) -> TuneResult:
    """Run (or resume) the search until ``trials`` trials have finished, then write ``best/`` and ``trials.csv``."""
    out_dir = Path(out_dir)
    study = open_study(out_dir, seed, n_startup=startup_trials(trials), prune_after=pruning_warmup(base.epochs))
    # The starting settings go first, so the search never ends worse than them on its own criterion.
    study.enqueue_trial(warm_start or settings_params(base), skip_if_exists=True)
    remaining = trials - finished_trials(study)
    if remaining > 0:
        study.optimize(lambda t: run_trial(t, data, reference, base, out_dir, progress), n_trials=remaining,
                       timeout=timeout, catch=(), show_progress_bar=progress)
    return write_outcome(study, out_dir, base.selection)


def write_outcome(study: optuna.Study, out_dir: Path, criterion: str) -> TuneResult:
    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not completed:
        raise RuntimeError(f"no trial of {out_dir} completed; raise --trials or --timeout")
    best = study.best_trial
    best_dir = out_dir / BEST_DIR
    staging = out_dir / f".{BEST_DIR}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(best.user_attrs["run_dir"], staging)
    shutil.rmtree(best_dir, ignore_errors=True)
    staging.rename(best_dir)
    summary = json.loads((best_dir / "train_summary.json").read_text())
    fallback = summary["best"][criterion].get("fallback")  # the criterion was constant over the best run's epochs
    write_json(best_dir / TUNE_SUMMARY, {"trial": best.number, "params": best.params, "value": best.value,
                                         "selection_fallback": fallback, "n_trials": len(study.trials)})
    table = study.trials_dataframe(attrs=("number", "value", "state", "params", "duration", "user_attrs"))
    with atomic_path(out_dir / TRIALS_FILE) as tmp:
        table.to_csv(tmp, index=False)
    return TuneResult(best_dir, dict(best.params), float(best.value), table, fallback)
