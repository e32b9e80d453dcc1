"""`mavias bench warm`: what a warm night saves and costs against a cold one on the same data.

A benchmark's training split is dealt into four class-stratified partitions; night k trains on the first k (the
validation and test splits stay whole). Night 1 trains from scratch, nights 2 and 3 warm from the night before, and
night 4 both ways: warm from night 3 (the nightly rule's share of the steps, :func:`warm_fraction`) and from scratch.
Each night trains the ERM reference and MAVias with the CLI defaults, as the nightly flow does; reported per night
are the training seconds (the epochs of both trainings), and for night 4 the closed-set test worst group and B' of both.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from mavias.core.protocol import evaluate_checkpoint, train_method, train_reference
from mavias.core.protocol.crossfit import fold_of
from mavias.core.synthetic import Sources
from mavias.core.train.checkpoints import EARLY_CHECKPOINT
from mavias.core.train.prepare import PreparedData
from mavias.core.train.warm import WarmStart, warm_fraction
from mavias.tools.bench.suite import ImageBenchmark, choose, default_config, prepare, sources_measured
from mavias.utils.atomic import write_report
from mavias.utils.progress import StepProgress

PARTITIONS = 4
FLOORS = {"time_ratio": 0.5, "wg_drop_points": 2.0}


def _night_data(data: PreparedData, partitions: np.ndarray, nights: int) -> PreparedData:
    train = data["train"].subset(np.flatnonzero(partitions < nights))
    return dataclasses.replace(data, splits={**data.splits, "train": train})


def _train_night(data: PreparedData, bench: ImageBenchmark, folder: Path, seed: int,
                 start: dict[str, WarmStart] | None) -> dict:
    """The reference and MAVias of one night; their checkpoints, training seconds (their epochs', so a resumed bench
    reports the same), B' and test worst groups."""
    reference = train_reference(data, default_config("erm", seed), folder / "reference", progress=False,
                                warm=None if start is None else start["reference"])
    cfg = default_config("mavias", seed)
    run = train_method(data, cfg if start is None else start["mavias"].apply(cfg), folder / "mavias", reference,
                       progress=False)
    seconds = float(reference.run.history["seconds"].sum() + run.history["seconds"].sum())
    worst = {name: evaluate_checkpoint(data, path, reference, closed_set_attrs=bench.attrs, n_boot=200)
             ["closed_set"]["worst_group_accuracy"]
             for name, path in (("reference", reference.checkpoint), ("mavias", run.checkpoint(cfg.selection)))}
    pairs = reference.biased_tags[["class", "tag"]].itertuples(index=False, name=None)
    biased = sorted(f"{name}: {tag}" for name, tag in pairs)
    return {"seconds": seconds, "train_images": len(data["train"]), "worst_group": worst, "biased": biased,
            "epochs": {"reference": int(reference.run.history["epoch"].max()),
                       "mavias": int(run.history["epoch"].max())},
            "checkpoints": {"reference": str(reference.checkpoint), "mavias": str(run.checkpoint(cfg.selection))}}


def run_warm_bench(work: Path, *, benchmark: str = "synthetic-scenes", seed: int = 0, replay: float = 0.25,
                   json_path: Path | None = None, progress: bool = False, sources: Sources = Sources()) -> dict:
    bench, = choose([benchmark])
    data, folder = prepare(work, bench, sources)
    partitions = fold_of(data["train"].labels.numpy(), seed, PARTITIONS)
    root = work / bench.name / sources.slug / f"seed{seed}"
    steps = StepProgress(PARTITIONS + 1, desc="bench warm", unit="night", enabled=progress)
    nights: dict[str, dict] = {}
    previous = None
    for night in range(1, PARTITIONS + 1):
        night_data = _night_data(data, partitions, night)
        start = None
        if previous is not None:
            new = int((partitions == night - 1).sum())
            fraction = warm_fraction(new, len(night_data["train"]) - new, replay)
            reference = Path(previous["checkpoints"]["reference"])
            start = {"reference": WarmStart(reference, fraction, proxy=reference.parent / EARLY_CHECKPOINT),
                     "mavias": WarmStart(Path(previous["checkpoints"]["mavias"]), fraction)}
        name = f"night {night}" + (" warm" if start else " cold")
        night_dir = root / (f"night-{night}-warm-replay{replay:g}" if start else f"night-{night}-cold")
        with steps.step(name):
            nights[name] = _train_night(night_data, bench, night_dir, seed, start) | (
                {"fraction": start["reference"].fraction} if start else {})
        previous = nights[name]
    with steps.step(f"night {PARTITIONS} cold"):
        nights[f"night {PARTITIONS} cold"] = _train_night(night_data, bench, root / f"night-{PARTITIONS}-cold", seed,
                                                          None)
    steps.close()
    report = {"benchmark": bench.name, "held_out": bench.held_out, "seed": seed, "replay": replay,
              "sources": sources_measured(folder), "nights": nights,
              "comparison": _compare(nights[f"night {PARTITIONS} warm"], nights[f"night {PARTITIONS} cold"])}
    if json_path is not None:
        write_report(json_path, report)
    return report


def _compare(warm: dict, cold: dict) -> dict:
    ratio = warm["seconds"] / cold["seconds"]
    drop = 100 * (cold["worst_group"]["mavias"] - warm["worst_group"]["mavias"])
    return {"time_ratio": ratio, "wg_drop_points": drop, "same_biased_tags": warm["biased"] == cold["biased"],
            "met": {"warm trains in <= 0.5x the cold time": ratio <= FLOORS["time_ratio"],
                    "MAVias WG within 2 points of cold": drop <= FLOORS["wg_drop_points"]}}
