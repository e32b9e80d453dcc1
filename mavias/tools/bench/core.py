"""`mavias bench core`: every method with the same tuning budget and starting length on every built-in benchmark,
over seeds.

Per benchmark (:mod:`mavias.tools.bench.suite`) and seed, an ERM reference with the CLI defaults: its B' forms the open-set
groups and the validation groups of the bias-unaware criterion (``val_robust``). Per method -- ERM, JTT, LfF, SD,
FLAC-B, DebiAN and MAVias (bias-unaware) and GroupDRO with the true groups (the oracle) -- ``mavias tune`` with the same
budget on seed 0 (the recipe's base settings first, then TPE with median pruning, the same criterion), then the chosen
settings on every further seed. Reported per (method, seed): the closed-set worst group and balanced accuracy (mean
over the true groups) on test, the open-set worst group under that seed's reference, test accuracy; "ERM (CLI
defaults)" is the reference itself. The test split is read only to report. Jobs run in worker processes, each
resumable (run folders and studies are kept): every reference, every method's search (with seed 0), and each further
seed of a search's choice as soon as that search ends.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from multiprocessing import active_children, get_context
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from mavias.core.protocol import Reference, evaluate_checkpoint, load_reference, train_method, train_reference
from mavias.core.synthetic import Sources
from mavias.core.train.config import TrainConfig, load_config, method_name
from mavias.core.train.prepare import PreparedData
from mavias.core.train.recipe import DEBIASING_LENGTH
from mavias.core.tune.search import MIN_TRIALS, tune
from mavias.core.tune.space import EPOCH_FACTORS, apply
from mavias.errors import UserError
from mavias.tools.bench.moons import run_moons
from mavias.tools.bench.suite import (
    ImageBenchmark,
    choose,
    default_config,
    mean_and_sd,
    prepare,
    sources_measured,
)
from mavias.utils.atomic import write_report
from mavias.utils.progress import StepProgress

ORACLE = "GroupDRO (oracle)"
DEFAULTS = "ERM (CLI defaults)"
# The methods by name, with what they change of the CLI defaults; both MAVias bias paths run under their own name,
# and the oracle selects on the true groups as GroupDRO's paper does.
METHODS: dict[str, dict] = {
    "ERM": {"method": "erm"}, "JTT": {"method": "jtt"}, "LfF": {"method": "lff"}, "SD": {"method": "sd"},
    "FLAC-B": {"method": "flac"}, "DebiAN": {"method": "debian"},
    "MAVias": {"method": "mavias", "mavias": {"bias_path": "joint"}},
    "MAVias-PoE": {"method": "mavias", "mavias": {"bias_path": "experts"}},
    "MAVias-PoE-CF": {"method": "mavias", "mavias": {"bias_path": "experts", "bias_folds": 5}},
    ORACLE: {"method": "groupdro", "selection": "val_true_wg"},
}
BIAS_UNAWARE_PEERS = ("ERM", "JTT", "LfF", "SD", "FLAC-B", "DebiAN")
VARIANTS = ("MAVias-PoE-CF",)  # run only when named: a setting of MAVias-PoE, not a peer
CRITERIA = ("val_robust", "val_acc")
# Seconds per training epoch relative to ERM's (shape-colours at 3x, one thread a worker; BENCHMARKS.md, "The 6-trial
# search on shape-colours at the 0.3 cut-off"): the bench starts the costliest searches first, so a cheap one ends last.
EPOCH_COST = {"DebiAN": 3.3, "LfF": 1.8, "FLAC-B": 1.4, "JTT": 1.2, "MAVias-PoE": 1.2, "MAVias-PoE-CF": 1.2,
              "MAVias": 1.1, "SD": 1.0, ORACLE: 1.0}
SEARCH_FIELDS = ("best_params", "best_value", "cost_ratio", "choice")  # what a method's search reports
DEFAULT_MAVIAS = method_name(TrainConfig())  # the floors are the product default's
TUNE_TRIALS = 6


@dataclass
class Outcome:
    """One method, one seed, one selection criterion: its test metrics."""

    benchmark: str
    method: str
    seed: int
    criterion: str
    epoch: int
    metrics: dict


def _metrics(data: PreparedData, bench: ImageBenchmark, checkpoint: Path, reference: Reference) -> dict:
    result = evaluate_checkpoint(data, checkpoint, reference, closed_set_attrs=bench.attrs, n_boot=200)
    closed, opened = result["closed_set"], result["open_set"]
    metrics = {"wg_acc": closed["worst_group_accuracy"], "avg_acc": closed["average_accuracy"],
               "openset_wg_acc": opened["worst_group_accuracy"], "test_accuracy": result["accuracy"]}
    if "urbancars" in result:
        metrics.update({k: result["urbancars"][k] for k in ("bg_gap", "coobj_gap", "both_gap")})
    return metrics


def _root(work: Path, bench: ImageBenchmark, sources: Sources) -> Path:
    return work / bench.slug / sources.slug


def _reference_dir(work: Path, bench: ImageBenchmark, seed: int, sources: Sources) -> Path:
    return _root(work, bench, sources) / f"seed{seed}" / "reference"


def _worker_data(work: Path, bench: ImageBenchmark, sources: Sources, threads: int) -> PreparedData:
    """A worker process's benchmark data (prepared before the workers start: only read here), on its threads."""
    torch.set_num_threads(threads)
    return prepare(work, bench, sources)[0]


def reference_job(work: Path, bench: ImageBenchmark, seed: int, threads: int, sources: Sources) -> list[dict]:
    """Train (or resume) one seed's ERM reference; its own outcomes as "ERM (CLI defaults)"."""
    data = _worker_data(work, bench, sources, threads)
    reference = train_reference(data, default_config("erm", seed), _reference_dir(work, bench, seed, sources),
                                progress=False, keep_epochs=True)
    return [asdict(Outcome(bench.name, DEFAULTS, seed, "val_acc", reference.run.best["val_acc"]["epoch"],
                           _metrics(data, bench, reference.checkpoint, reference)))]


def search_job(work: Path, bench: ImageBenchmark, method: str, trials: int, threads: int, sources: Sources,
               compute: float) -> dict:
    """Tune one method on seed 0 (``trials`` 0: no search, its CLI defaults) and report seed 0; what the further seeds
    train (:func:`seed_job`, each a job of its own so that the workers stay busy to the end)."""
    data = _worker_data(work, bench, sources, threads)
    root = _method_root(work, bench, sources, method, compute, trials)
    plan = {"method": method, "benchmark": bench.name, "base": method_config(method, compute), "root": root,
            "first_dir": root / "seed0", **dict.fromkeys(SEARCH_FIELDS), "best_params": {}}
    reference = load_reference(_reference_dir(work, bench, 0, sources), data)
    if trials:
        tuned = tune(data, reference, plan["base"], root / "tune", trials=trials,
                     seed=_sampler_seed(bench.name, method))
        plan.update(base=tuned.base, first_dir=tuned.best_dir, best_params=tuned.best_params,
                    best_value=tuned.best_value, cost_ratio=tuned.cost_ratio, choice=tuned.choice(tuned.base.selection))
    return {**plan, "seed0": _train_seed(bench, plan, 0, data, reference)}


def seed_job(work: Path, bench: ImageBenchmark, plan: dict, seed: int, threads: int, sources: Sources) -> dict:
    """Train a search's choice (``plan``, from :func:`search_job`) on one further seed."""
    data = _worker_data(work, bench, sources, threads)
    return _train_seed(bench, plan, seed, data, load_reference(_reference_dir(work, bench, seed, sources), data))


def _train_seed(bench: ImageBenchmark, plan: dict, seed: int, data: PreparedData, reference: Reference) -> dict:
    """One seed's run of the plan's settings (``reference``: that seed's): its test metrics per criterion and its
    length."""
    method = plan["method"]
    cfg = apply(plan["base"].model_copy(update={"seed": seed}), plan["best_params"])
    run_dir = plan["first_dir"] if seed == 0 else plan["root"] / f"seed{seed}"
    run = train_method(data, cfg, run_dir, reference, progress=False)
    outcomes = [asdict(Outcome(bench.name, method, seed, criterion, run.best[criterion]["epoch"],
                               _metrics(data, bench, run.checkpoint(criterion), reference)))
                for criterion in (CRITERIA if method != ORACLE else (cfg.selection,))]
    return {"seed": seed, "outcomes": outcomes,
            "length": {"epochs": int(run.history["epoch"].max()), "seconds": float(run.history["seconds"].sum())}}


def _method_root(work: Path, bench: ImageBenchmark, sources: Sources, method: str, compute: float,
                 trials: int) -> Path:
    """A method's folder per length and search budget: a resumed bench never mixes runs of another budget."""
    slug = method.lower().replace(" ", "-").replace("(", "").replace(")", "")
    return _root(work, bench, sources) / (f"{slug}-x{compute:g}" + (f"-t{trials}" if trials else ""))


def compute_label(compute: float, trials: int) -> str:
    """The report's account of each method's length: equal without a search; with one, the same starting length and
    the same searched range for every method."""
    if not trials:
        return f"{compute:g} x the recipe's steps, every method"
    low, high = EPOCH_FACTORS
    return (f"{compute:g} x the recipe's steps to start, every method; each search tried {low:g}-{high:g} x that "
            "(the lengths trained: 'trained')")


def method_result(plan: dict, seeds: list[dict]) -> dict:
    """A method's row of the report: every seed's outcomes and length, its search and seed 0's chosen settings."""
    seeds = sorted([plan["seed0"], *seeds], key=lambda result: result["seed"])
    chosen = load_config(plan["first_dir"] / "config.yaml")  # the recipe's lr and length resolved
    return {"method": plan["method"], "benchmark": plan["benchmark"],
            "outcomes": [outcome for result in seeds for outcome in result["outcomes"]],
            **{key: plan[key] for key in SEARCH_FIELDS},
            "trained": {result["seed"]: result["length"] for result in seeds},
            "chosen": {"lr": chosen.optim.lr, "epochs": chosen.epochs}}


def method_config(method: str, compute: float | None = None) -> TrainConfig:
    """The bench's starting settings of ``method`` (its CLI defaults and what its name changes), seed 0."""
    return default_config(**METHODS[method], seed=0, length_factor=compute)


def _sampler_seed(benchmark: str, method: str) -> int:
    """A search's sampler seed of its own per (benchmark, method), so no two searches draw the same settings."""
    return int(hashlib.sha256(f"{benchmark}/{method}".encode()).hexdigest()[:8], 16)


def summarise(outcomes: list[dict]) -> list[dict]:
    """Mean and sd over seeds per (method, criterion) of every metric."""
    frame = pd.DataFrame([{"method": o["method"], "criterion": o["criterion"], "seed": o["seed"], **o["metrics"]}
                          for o in outcomes])
    return mean_and_sd(frame, ["method", "criterion"])


def _wg(summary: list[dict], method: str, criterion: str = "val_robust") -> float:
    return next(r["wg_acc"]["mean"] for r in summary if r["method"] == method and r["criterion"] == criterion)


def benchmark_floors(summary: list[dict], n_classes: int) -> dict:
    """Per benchmark: the defaults learn (ERM balanced accuracy >= 2 x chance), tuned MAVias >= ERM (CLI defaults) +
    10 WG points, every method above chance (balanced accuracy), and MAVias's margin over each tuned peer run."""
    avg = {(r["method"], r["criterion"]): r["avg_acc"]["mean"] for r in summary}
    chance = 1.0 / n_classes
    floors: dict = {"chance": chance, "met": {"ERM (CLI defaults) balanced acc >= 2 x chance":
                                              avg[(DEFAULTS, "val_acc")] >= 2 * chance,
                                              "every method above chance": all(a > chance for a in avg.values())}}
    if (DEFAULT_MAVIAS, "val_robust") not in avg:
        return floors
    mavias = _wg(summary, DEFAULT_MAVIAS)
    floors["mavias_minus_defaults_wg"] = round(mavias - _wg(summary, DEFAULTS, "val_acc"), 9)
    floors["met"]["tuned MAVias WG >= ERM (CLI defaults) WG + 10"] = floors["mavias_minus_defaults_wg"] >= 0.10
    floors["mavias_minus_peer_wg"] = {peer: round(mavias - _wg(summary, peer), 9) for peer in BIAS_UNAWARE_PEERS
                                      if (peer, "val_robust") in avg}
    return floors


def peer_floor(benchmarks: dict[str, dict]) -> dict:
    """Tuned MAVias WG >= every tuned bias-unaware peer's on >= 2/3 of the benchmarks, within 3 points on the rest
    (over the benchmarks where MAVias and at least one peer ran)."""
    margins = {name: min(result["floors"]["mavias_minus_peer_wg"].values()) for name, result in benchmarks.items()
               if result["floors"].get("mavias_minus_peer_wg")}
    ahead = [name for name, margin in margins.items() if margin >= 0]
    close = all(margin >= -0.03 for margin in margins.values())
    return {"worst_margin_per_benchmark": margins, "ahead_on": ahead,
            "met": bool(margins) and len(ahead) >= 2 / 3 * len(margins) and close}


@contextmanager
def job_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """Worker processes for the bench's jobs. A job's error stops the bench at once: the queued jobs are cancelled and
    the running ones stopped (each resumes from its kept runs next time), instead of being waited for."""
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"))
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in active_children():  # the pool's: the bench starts no other process
            worker.terminate()
        raise
    pool.shutdown()


def _run_jobs(pool: ProcessPoolExecutor, jobs: list[tuple], steps: StepProgress) -> list:
    futures = [(label, pool.submit(fn, *args)) for label, fn, args in jobs]
    results = []
    for label, future in futures:
        with steps.step(label):
            results.append(future.result())
    return results


def _run_methods(pool: ProcessPoolExecutor, searches: list[tuple], seeds: int, steps: StepProgress) -> list[dict]:
    """Every search of ``searches`` (:func:`search_job`'s arguments), the costliest started first; once one ends, each
    further seed of its choice is a job of its own, so the last searches' seeds share the workers instead of following
    each other on one. The report keeps the order of ``searches``."""
    by_label = {f"{args[1].name}: {args[2]}": args for args in searches}
    costliest_first = sorted(by_label.items(), key=lambda item: -EPOCH_COST.get(item[1][2], 1.0))
    pending = {pool.submit(search_job, *args): label for label, args in costliest_first}
    plans, further = {}, {label: [] for label in by_label}
    while pending:
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            label, result = pending.pop(future), future.result()
            steps.finished(label if "seed0" in result else f"{label}, seed {result['seed']}")
            if "seed0" not in result:
                further[label].append(result)
                continue
            plans[label] = result
            work, bench, _, _, threads, sources, _ = by_label[label]
            for seed in range(1, seeds):
                pending[pool.submit(seed_job, work, bench, result, seed, threads, sources)] = label
    return [method_result(plans[label], further[label]) for label in by_label]


def choose_methods(names: list[str] | None) -> list[str]:
    """The methods to tune (all but the variants by default), in the bench's order; an unknown name says which
    exist."""
    if not names:
        return [key for key in METHODS if key not in VARIANTS]
    by_code = {settings["method"]: key for key, settings in METHODS.items() if settings["method"] != "mavias"}
    by_key = by_code | {key.lower(): key for key in METHODS}
    unknown = [name for name in names if name.lower() not in by_key]
    if unknown:
        raise UserError(f"unknown method {', '.join(map(repr, unknown))}; use --method {' or '.join(METHODS)}")
    wanted = {by_key[name.lower()] for name in names}
    return [key for key in METHODS if key in wanted]


def run_core_bench(work: Path, *, seeds: int = 3, trials: int = TUNE_TRIALS, benchmarks: list[str] | None = None,
                   methods: list[str] | None = None, json_path: Path | None = None, workers: int = 2,
                   progress: bool = False, moons: bool = True, sources: Sources = Sources(),
                   compute: float | None = None, share: float = 1.0) -> dict:
    """The bench; ``compute`` gives every tuned method the same length, a multiple of the recipe's steps (by default
    a debiasing method's own, ERM's included, so that no method trains longer than its peers); ``share`` of each
    benchmark's training and validation images."""
    compute = compute or DEBIASING_LENGTH
    if 0 < trials < MIN_TRIALS:
        raise UserError(f"--trials {trials} cannot search: the first trial trains the starting settings; give "
                        f"--trials 0 (no search) or {MIN_TRIALS} or more")
    start = time.perf_counter()
    chosen, tuned_methods = choose(benchmarks, share), choose_methods(methods)
    threads = max(1, (torch.get_num_threads() or 1) // workers)
    steps = StepProgress(len(chosen) * seeds * (1 + len(tuned_methods)), desc="bench core", unit="job",
                         enabled=progress)
    report: dict = {"seeds": seeds, "tune_trials": trials, "workers": workers, "benchmarks": {},
                    "compute": compute_label(compute, trials),
                    "share": share}
    for bench in chosen:  # prepared once here, so the workers only read the generated images and embeddings
        prepare(work, bench, sources)
    with job_pool(workers) as pool:
        references = _run_jobs(pool, [(f"{b.name} seed {s}: ERM reference", reference_job,
                                       (work, b, s, threads, sources))
                                      for b in chosen for s in range(seeds)], steps)
        methods = _run_methods(pool, [(work, b, m, trials, threads, sources, compute)
                                      for b in chosen for m in tuned_methods], seeds, steps)
    steps.close()
    for bench in chosen:
        outcomes = [o for ref in references for o in ref if o["benchmark"] == bench.name]
        tuned = [m for m in methods if m["benchmark"] == bench.name]
        outcomes += [o for m in tuned for o in m["outcomes"]]
        summary = summarise(outcomes)
        data, folder = prepare(work, bench, sources)
        report["benchmarks"][bench.name] = {
            "held_out": bench.held_out, "sources": sources_measured(folder), "summary": summary,
            "floors": benchmark_floors(summary, len(data.classes)),
            "tuning": {m["method"]: {k: m[k] for k in (*SEARCH_FIELDS, "chosen", "trained")} for m in tuned},
            "runs": outcomes}
    report["peer_floor"] = peer_floor(report["benchmarks"])
    if moons:
        report["two_moons_3d"] = run_moons(work, seeds)
    report.update(wall_seconds=time.perf_counter() - start, machine=_machine())
    if json_path is not None:
        write_report(json_path, report)
    return report


def _machine() -> dict:
    import os
    import platform

    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "threads": torch.get_num_threads(), "numpy": np.__version__}
