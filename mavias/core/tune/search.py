"""Hyperparameter search for any method with Optuna: TPE sampling, median pruning per epoch, resumable SQLite study.

Trials are scored only by the run's bias-unaware selection criterion (``cfg.selection``, default ``val_robust``) on
the validation split; the test split is never read. The base settings are resolved first (the recipe's learning
rate range test, epochs for the data size: ``base/`` in the search folder) and tried first; the search covers
:mod:`mavias.core.tune.space`; ties on the criterion go to the higher validation accuracy. A trial's run folder is
named by its settings, so a trial cut off mid-training resumes from its last checkpoint when the search is started
again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import pandas as pd

from mavias.core import protocol  # its names load on first use: planning a batch imports no torch
from mavias.core.train.config import TrainConfig
from mavias.core.train.sanity import TrainingDiverged, divergence
from mavias.core.train.selection import selection_key
from mavias.core.tune.space import Param, current_values, known_space, search_space, searched_keys, suggest_config
from mavias.errors import UserError
from mavias.utils.atomic import write_json
from mavias.utils.csvfile import write_csv
from mavias.utils.disk import sha256_file
from mavias.utils.userfiles import read_text

if TYPE_CHECKING:
    from mavias.core.protocol import Reference
    from mavias.core.train.prepare import PreparedData

log = logging.getLogger(__name__)

STUDY_NAME = "mavias"
STORAGE_FILE = "study.db"
TRIALS_FILE = "trials.csv"
BEST_DIR = "best"
BASE_DIR = "base"
TUNE_SUMMARY = "tune.json"
MIN_TRIALS = 2  # the starting settings and at least one other
START_ATTR = "start"  # the trial of the starting settings (the latest, in a study searched night after night)
PROGRESS_STEPS = 10  # a trial reports its best score at each tenth of its run (progress_step)


@dataclass
class TuneResult:
    best_dir: Path
    best_params: dict
    best_value: float
    trials: pd.DataFrame
    selection_fallback: str | None
    base: TrainConfig | None = None
    cost_ratio: float | None = None  # epochs trained / epochs N full trainings would have taken
    trial: int | None = None  # the chosen trial's number (0: the starting settings)
    start_value: float | None = None  # the starting settings' score (trial 0), None when it did not finish

    def choice(self, criterion: str) -> str:
        """Which trial won and by how much over the starting settings: near a criterion's ceiling a search often
        leaves them on a difference of one or two validation images."""
        if self.trial == 0:
            return f"the starting settings (trial 0, {criterion} {self.best_value:.4f})"
        start = "did not finish" if self.start_value is None else f"{self.start_value:.4f}"
        return f"trial {self.trial} ({criterion} {self.best_value:.4f}; the starting settings, trial 0: {start})"


def load_warm_start(path: Path, base: TrainConfig, space: list[Param] | None = None) -> dict:
    """The settings of ``path`` (JSON, e.g. a previous search's ``best/tune.json`` ``params``), checked against the
    search: its keys, and the ranges ``space`` (default: those ``base`` already fixes) sets; a :class:`UserError`
    saying what to fix otherwise."""
    ranges = {param.key: param for param in (space or known_space(base))}
    keys = searched_keys(base.method)
    try:
        params = json.loads(read_text(path, what="--warm-start"))
    except ValueError as err:
        raise UserError(f"--warm-start {path}: cannot read it as JSON ({err}); give a JSON object such as "
                        '{"optim.lr": 0.05, "epochs": 20}') from None
    if not isinstance(params, dict) or not params:
        raise UserError(f"--warm-start {path}: expected a JSON object of settings ({', '.join(keys)})")
    if unknown := sorted(set(params) - set(keys)):
        raise UserError(f"--warm-start {path}: unknown setting(s) {', '.join(unknown)}; searched: {', '.join(keys)}")
    for name, value in params.items():
        if name in ranges and not ranges[name].contains(value):
            raise UserError(f"--warm-start {path}: {name} = {value!r} is outside the searched range "
                            f"[{ranges[name].low:g}, {ranges[name].high:g}]")
    return params


def trial_dir(out_dir: Path, cfg: TrainConfig) -> Path:
    digest = hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:12]
    return out_dir / "trials" / digest


def run_trial(trial: optuna.Trial, data: PreparedData, reference: Reference | None, base: TrainConfig,
              space: list[Param], out_dir: Path, progress: bool = False) -> float:
    """Train one configuration epoch by epoch, reporting the best criterion so far so the pruner can stop it."""
    cfg = suggest_config(trial, base, space)
    run_dir = trial_dir(out_dir, cfg)
    trial.set_user_attr("run_dir", str(run_dir))
    reported: set[int] = set()
    while True:
        try:
            result = protocol.train_method(data, cfg, run_dir, reference, progress=progress, stop_after=1)
        except TrainingDiverged as diverged:  # a searched rate too high for this data: stop the trial, not the search
            what = divergence(diverged)
            trial.set_user_attr("diverged", what)
            log.warning("trial %d stopped: %s", trial.number, what)
            raise optuna.TrialPruned() from diverged
        trial.set_user_attr("epochs_trained", len(result.history))
        if cfg.selection not in result.best:  # not validated yet (a small epoch is validated every few)
            continue
        score = result.best[cfg.selection]["score"]
        if result.completed:
            return score
        if (step := progress_step(len(result.history), cfg.epochs)) not in reported:
            reported.add(step)
            trial.report(score, step=step)
            if trial.should_prune():
                raise optuna.TrialPruned()


def startup_trials(trials: int) -> int:
    """Random trials before TPE models the results: half the budget, at most Optuna's default of 10, so a small
    budget still gets some guided trials."""
    return max(2, min(10, trials // 2))


def progress_step(epochs_done: int, epochs: int) -> int:
    """The step a trial reports its best score at: the tenths of its own run it has done. The number of epochs is
    searched too, and at one epoch a short run's schedule has annealed where a long one's has not: trials of
    different lengths are compared at the same share of their runs."""
    return PROGRESS_STEPS * epochs_done // epochs


def _sampler(seed: int, n_startup: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)


def _storage(out_dir: Path) -> str:
    return f"sqlite:///{out_dir / STORAGE_FILE}"


def open_study(out_dir: Path, seed: int = 0, *, requeue_stale: bool = True, n_startup: int = 10) -> optuna.Study:
    """Create or reopen the study in ``out_dir``; with ``requeue_stale`` (one search process at a time) trials left
    RUNNING by a killed search are marked failed and queued again with the same settings. A trial below the median
    of the finished ones at the same share of their runs (:func:`progress_step`) may be pruned only in the second
    half of its run: settings that debias start slower (a faster projection layer takes the shortcut away from the
    main model first), and pruning early stopped exactly those."""
    out_dir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial is the caller's to show, not Optuna's
    study = optuna.create_study(
        study_name=STUDY_NAME,
        storage=_storage(out_dir),
        direction="maximize",
        sampler=_sampler(seed, n_startup),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=PROGRESS_STEPS // 2),
        load_if_exists=True,
    )
    if study.trials:  # resumed: a sampler seeded as the first process's was would draw its random settings again
        study.sampler = _sampler(seed + len(study.trials), n_startup)
    if requeue_stale:
        for stale in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
            study.tell(stale.number, state=optuna.trial.TrialState.FAIL)
            if stale.params:  # a trial killed before it sampled its settings has nothing to repeat
                study.enqueue_trial(stale.params, user_attrs={START_ATTR: True} if stale.user_attrs.get(START_ATTR)
                                    else None)
    return study


def enqueue_start(study: optuna.Study, params: dict) -> None:
    """Queue the starting settings, marked as such, unless a trial of them finished, runs or waits (one that failed
    is tried again: the search must not end without them)."""
    live = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING,
            optuna.trial.TrialState.WAITING)
    trials = study.get_trials(deepcopy=False, states=live)
    if not any(t.user_attrs.get(START_ATTR) or params in (t.params, t.system_attrs.get("fixed_params"))
               for t in trials):
        study.enqueue_trial(params, user_attrs={START_ATTR: True})


def finished_trials(study: optuna.Study) -> int:
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=done))


def check_trials(trials: int) -> None:
    if trials < MIN_TRIALS:
        raise UserError(f"--trials {trials} cannot search: the first trial trains the starting settings; give "
                        f"--trials {MIN_TRIALS} or more (8-20 to learn something; pruning keeps them cheap)")


def tune(data: PreparedData, reference: Reference | None, base: TrainConfig, out_dir: str | Path, *, trials: int,
         timeout: float | None = None, warm_start: dict | Path | None = None, seed: int = 0,
         progress: bool = False, request: str | None = None, also: tuple[str, ...] = ()) -> TuneResult:
    """Run (or resume) the search until ``trials`` trials have finished, then write ``best/`` and ``trials.csv``.
    ``warm_start``: the settings to try first (a dict, or a JSON file checked against the search space);
    ``request``: :func:`search_requests` of what is searched, refused when the folder holds a search of another
    (than it or ``also``: see :func:`check_same_search`)."""
    check_trials(trials)
    out_dir = Path(out_dir)
    if request is not None:
        check_same_search(out_dir, request, *also)  # before the recipe is resolved into a folder another may own
    # the recipe's choices, kept for a resumed search
    base = protocol.resolve_run(data, base, out_dir / BASE_DIR).config
    space = search_space(base)
    if isinstance(warm_start, Path):
        warm_start = load_warm_start(warm_start, base, space)
    study = open_study(out_dir, seed, n_startup=startup_trials(trials))
    if request is not None:
        study.set_user_attr("request", request)
    # The starting settings go first, so the search never ends worse than them on its own criterion.
    enqueue_start(study, warm_start or current_values(base, space))
    remaining = trials - finished_trials(study)
    if remaining > 0:
        study.optimize(lambda t: run_trial(t, data, reference, base, space, out_dir, progress), n_trials=remaining,
                       timeout=timeout, catch=(), show_progress_bar=progress)
    return write_outcome(study, out_dir, base, timeout)


def search_requests(base: TrainConfig, manifest: pd.DataFrame, inputs: Sequence[Path] = ()) -> tuple[str, str]:
    """What a search folder searches: the settings asked for, the manifest's images and the contents of the other
    ``inputs`` the trials read (the relevance and tags behind the bias embeddings, the reference checkpoint behind the
    criterion's groups); a resume asks the same. Returned with the request of a version that hashed no inputs, so
    that version's folders resume."""
    rows = manifest[["sample_id", "label", "split"]].astype(str).sort_values(["split", "sample_id"])
    without_inputs = json.dumps({"config": base.model_dump(mode="json"), "rows": rows.to_numpy().tolist()})
    older = hashlib.sha256(without_inputs.encode()).hexdigest()[:16]
    if not inputs:
        return older, older
    # json.dumps of the payload with "inputs" appended, without serialising the rows again
    with_inputs = without_inputs[:-1] + ', "inputs": ' + json.dumps([sha256_file(path) for path in inputs]) + "}"
    return hashlib.sha256(with_inputs.encode()).hexdigest()[:16], older


def check_same_search(out_dir: Path, request: str, *also: str) -> None:
    """Refuse ``out_dir`` when it holds a search of another :func:`search_requests` (than ``request`` or ``also``: the
    request an older version would have made of the same search)."""
    if not (out_dir / STORAGE_FILE).is_file():
        return
    try:
        found = optuna.load_study(study_name=STUDY_NAME, storage=_storage(out_dir)).user_attrs.get("request")
    except KeyError:  # a search killed before it created its study
        return
    if found is not None and found not in (request, *also):
        raise UserError(f"{out_dir} holds a search of other settings or other training data; its best would be "
                        "reported as this one's", hint="pass a new --out, or the settings and data of that search "
                        "to resume it")


def all_diverged(out_dir: Path, diverged: int) -> UserError:
    return UserError(f"no trial of {out_dir} completed: {diverged} diverged (loss NaN or infinite); lower optim.lr "
                     "(searched from a tenth to 10x of it), or leave it unset so a range test chooses it, and search "
                     "into a new --out folder")


def write_outcome(study: optuna.Study, out_dir: Path, base: TrainConfig, timeout: float | None = None) -> TuneResult:
    criterion = base.selection
    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not completed:
        if diverged := sum("diverged" in t.user_attrs for t in study.get_trials(deepcopy=False)):
            raise all_diverged(out_dir, diverged)
        hint = f"--timeout {timeout:g} s ended it before" if timeout else "no trial finished"
        raise UserError(f"no trial of {out_dir} completed ({hint}); a trial trains up to {base.epochs} epochs: raise "
                        "--timeout or --trials and run the same command again (finished epochs are kept)")
    best = best_trial(completed, criterion)
    best_dir = out_dir / BEST_DIR
    staging = out_dir / f".{BEST_DIR}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(best.user_attrs["run_dir"], staging)
    shutil.rmtree(best_dir, ignore_errors=True)
    staging.rename(best_dir)
    summary = json.loads((best_dir / "train_summary.json").read_text())
    fallback = summary["best"][criterion].get("fallback")  # the criterion was constant over the best run's epochs
    ratio = cost_ratio(study, base.epochs)
    start = next((float(t.value) for t in reversed(completed) if t.user_attrs.get(START_ATTR, t.number == 0)), None)
    write_json(best_dir / TUNE_SUMMARY, {"trial": best.number, "params": best.params, "value": best.value,
                                         "start_value": start, "selection_fallback": fallback,
                                         "n_trials": len(study.trials), "cost_ratio": ratio,
                                         "base": base.model_dump(mode="json")})
    table = study.trials_dataframe(attrs=("number", "value", "state", "params", "duration", "user_attrs"))
    write_csv(table, out_dir / TRIALS_FILE)
    return TuneResult(best_dir, dict(best.params), float(best.value), table, fallback, base, ratio, best.number, start)


def best_trial(completed: list[optuna.trial.FrozenTrial], criterion: str) -> optuna.trial.FrozenTrial:
    """The trial with the best criterion, ties broken by :func:`selection_key` (the selected epoch's validation
    accuracy, as between a run's epochs), then the earlier trial."""
    def key(trial: optuna.trial.FrozenTrial) -> tuple[tuple[float, float], int]:
        summary = Path(trial.user_attrs["run_dir"]) / "train_summary.json"
        selected = json.loads(summary.read_text())["best"].get(criterion, {}) if summary.is_file() else {}
        return selection_key(trial.value, selected.get("val_acc", float("-inf"))), -trial.number
    return max(completed, key=key)


def cost_ratio(study: optuna.Study, base_epochs: int) -> float | None:
    """Epochs the finished trials trained, over the epochs their full trainings would have taken (pruning's saving)."""
    done = [t for t in study.get_trials(deepcopy=False)
            if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    if not done:
        return None
    trained = sum(t.user_attrs.get("epochs_trained", t.last_step or 0) for t in done)
    return trained / sum(t.params.get("epochs", base_epochs) for t in done)
