"""`mavias bench audit`: how well the label-free audit finds each benchmark's shortcuts, and how well its worst group
tracks the true one.

The benchmarks' tags come from their image taggers and their relevance from the offline judge unless the sources say
otherwise (``--tags oracle``, ``--relevance oracle``, ``--leak K``). Per benchmark and seed: an ERM reference trained
with the CLI defaults gives B' (label-free rule, and the paper's rule
alongside), scored by precision and recall against the benchmark's true shortcut tags (read only to score). On seed
0, checkpoints of differing bias (four epochs of the reference, and MAVias, JTT and the GroupDRO oracle with the CLI
defaults) are evaluated on test twice: the label-free open-set worst group under the reference's B', and the
closed-set worst group over the true (class, attribute) groups; reported are Spearman's rho and the mean absolute gap.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from mavias.core.evaluate.openset import biased_tag_recovery
from mavias.core.protocol import Reference, evaluate_checkpoint, train_method, train_reference
from mavias.core.synthetic import Sources
from mavias.core.train.checkpoints import epoch_path
from mavias.core.train.prepare import PreparedData
from mavias.tools.bench.suite import ImageBenchmark, choose, default_config, prepare, sources_measured
from mavias.utils.atomic import write_report
from mavias.utils.progress import StepProgress

AGREEMENT_METHODS = ("mavias", "jtt", "groupdro")
FLOORS = {"recall": 0.9, "precision": 0.8, "spearman": 0.8, "mean_gap": 0.10}


def recovery(reference: Reference, truth: dict[str, set[str]]) -> dict:
    """B' precision and recall against the true shortcut tags, for the label-free rule and the paper's."""
    found = {"label_free": biased_tag_recovery(reference.biased_tags, truth),
             "paper": biased_tag_recovery(reference.paper_biased_tags, truth)}
    found["label_free"]["tags"] = sorted(map(list, zip(reference.biased_tags["class"], reference.biased_tags["tag"])))
    return found


def reference_epochs(run: Path, epochs: int) -> dict[str, Path]:
    """Four kept epochs of the reference: the first, a quarter, half way and the last."""
    chosen = sorted({1, max(1, epochs // 4), max(1, epochs // 2), epochs})
    return {f"ERM epoch {e}": epoch_path(run, e) for e in chosen}


def agreement_point(data: PreparedData, bench: ImageBenchmark, checkpoint: Path, reference: Reference) -> dict:
    result = evaluate_checkpoint(data, checkpoint, reference, closed_set_attrs=bench.attrs, n_boot=200)
    return {"label_free_wg": result["open_set"]["worst_group_accuracy"],
            "label_free_group": result["open_set"]["worst_group"],
            "closed_set_wg": result["closed_set"]["worst_group_accuracy"],
            "closed_set_group": result["closed_set"]["worst_group"]}


def agreement(points: dict[str, dict]) -> dict:
    free = np.array([p["label_free_wg"] for p in points.values()])
    closed = np.array([p["closed_set_wg"] for p in points.values()])
    rho = spearmanr(free, closed).statistic if len(points) > 2 and np.ptp(free) > 0 and np.ptp(closed) > 0 else None
    return {"n_checkpoints": len(points), "spearman": None if rho is None else float(rho),
            "mean_gap": float(np.mean(np.abs(free - closed))), "checkpoints": points}


def run_audit_benchmark(work: Path, bench: ImageBenchmark, seeds: int, progress: StepProgress,
                        sources: Sources = Sources()) -> dict:
    start = time.perf_counter()
    data, folder = prepare(work, bench, sources)
    truth = bench.true_shortcuts(folder)
    root = work / bench.name / sources.slug
    recoveries, points = {}, {}
    for seed in range(seeds):
        with progress.step(f"{bench.name} seed {seed}: ERM reference (CLI defaults)"):
            reference = train_reference(data, default_config("erm", seed), root / f"seed{seed}" / "reference",
                                        progress=False, keep_epochs=True)
        recoveries[seed] = recovery(reference, truth)
        if seed:
            continue
        epochs = reference.run.history["epoch"].max()
        checkpoints = reference_epochs(reference.checkpoint.parent, int(epochs))
        for method in AGREEMENT_METHODS:
            cfg = default_config(method, 0)
            with progress.step(f"{bench.name} seed 0: {method} (CLI defaults)"):
                run = train_method(data, cfg, root / "seed0" / method, reference, progress=False)
            checkpoints[f"{method} (CLI defaults)"] = run.checkpoint(cfg.selection)
        points = {name: agreement_point(data, bench, path, reference) for name, path in checkpoints.items()}
    agreed = agreement(points)
    return {"held_out": bench.held_out, "sources": sources_measured(folder), "recovery": recoveries,
            "agreement": agreed, "floors": audit_floors(recoveries, agreed),
            "wall_seconds": time.perf_counter() - start}


def audit_floors(recoveries: dict, agreed: dict) -> dict:
    """The floors over every seed; a seed whose B' is empty has no precision (its recall then fails the floor)."""
    recall = min(r["label_free"]["recall"] for r in recoveries.values())
    precision = _lowest_defined(r["label_free"]["precision"] for r in recoveries.values())
    met = {"recall >= 0.9 (every seed)": recall >= FLOORS["recall"],
           "precision >= 0.8 (every seed)": precision >= FLOORS["precision"],
           "spearman >= 0.8": agreed["spearman"] is not None and agreed["spearman"] >= FLOORS["spearman"],
           "mean gap <= 10 points": agreed["mean_gap"] <= FLOORS["mean_gap"]}
    return {"min_recall": recall, "min_precision": precision, "met": met}


def _lowest_defined(values: Iterable[float]) -> float:
    defined = [value for value in values if value == value]
    return min(defined) if defined else float("nan")


def run_audit_bench(work: Path, *, seeds: int = 3, benchmarks: list[str] | None = None, json_path: Path | None = None,
                    progress: bool = False, sources: Sources = Sources()) -> dict:
    chosen = choose(benchmarks)
    steps = StepProgress(len(chosen) * (seeds + len(AGREEMENT_METHODS)), desc="bench audit", unit="training",
                         enabled=progress)
    report: dict = {"seeds": seeds, "floors": FLOORS, "benchmarks": {}}
    for bench in chosen:
        report["benchmarks"][bench.name] = run_audit_benchmark(work, bench, seeds, steps, sources)
        if json_path is not None:
            write_report(json_path, report)
    steps.close()
    return report
