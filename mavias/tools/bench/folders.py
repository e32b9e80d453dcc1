"""`mavias bench folders`: the one-command audit as a user with a small folder meets it.

Per folder seed: a folder of ``classes`` x ``per_class`` images (circle / square / triangle, each on its own
background colour with probability ``align``: one planted shortcut per class; a tags sidecar as an external tagger
writes it) is audited from scratch with the CLI defaults (`mavias audit FOLDER --tags tags.csv`). Scored: the
label-free B' against the planted colours (precision, recall; with ``align`` at most 1 / ``classes`` nothing is
planted and every pair found is a false one), the pairs the audit could not decide, whether the reference was
cross-fitted, and the audit's wall time.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from mavias.core.datasets.generate import SHORTCUT_CLASSES, write_shortcut_imagefolder
from mavias.core.evaluate.openset import biased_tag_recovery
from mavias.core.evaluate.shortcuts import is_undecided
from mavias.core.protocol.crossfit import CROSSFIT_DIR
from mavias.ops.audit import AuditOptions, run_audit
from mavias.utils.atomic import write_report
from mavias.utils.csvfile import read_csv
from mavias.utils.progress import StepProgress

FLOORS = {"recall": 0.9, "precision": 0.8, "wall_seconds": 240.0}


def audit_folder(work: Path, seed: int, *, per_class: int, classes: int, align: float) -> dict:
    """One folder, generated and audited from scratch; its B' scored against the planted colours."""
    folder = work / f"folder{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    root, sidecar = write_shortcut_imagefolder(folder / "photos" / "shapes", per_class, classes=classes, align=align,
                                               seed=seed)
    start = time.perf_counter()
    result = run_audit(AuditOptions(root, folder / "audit", tags=sidecar, progress=False))
    wall = time.perf_counter() - start
    biased = read_csv(result.biased_tags, keep_default_na=False)
    evidence = read_csv(result.evidence, keep_default_na=False)
    planted = align > 1 / classes  # at 1 / classes the colour is independent of the class
    truth = {shape: {colour} for shape, colour in list(SHORTCUT_CLASSES.items())[:classes] if planted}
    return {"wall_seconds": wall, "recovery": biased_tag_recovery(biased, truth),
            "found": sorted(map(list, zip(biased["class"], biased["tag"]))),
            "undecided": sorted(map(list, zip(*_undecided(evidence)))),
            "cross_fitted": (result.evidence.parent / CROSSFIT_DIR).is_dir()}


def _undecided(evidence) -> tuple[list[str], list[str]]:
    rows = evidence[is_undecided(evidence)]  # reads the CSV's text as is_associated and as_flag do
    return rows["class"].tolist(), rows["tag"].tolist()


def run_folders_bench(work: Path, *, folders: int = 5, per_class: int = 200, classes: int = 3, align: float = 0.9,
                      json_path: Path | None = None, progress: bool = False) -> dict:
    steps = StepProgress(folders, desc="bench folders", unit="audit", enabled=progress)
    report: dict = {"folders": folders, "per_class": per_class, "classes": classes, "align": align, "floors": FLOORS,
                    "runs": {}}
    for seed in range(folders):
        with steps.step(f"folder {seed}: mavias audit"):
            report["runs"][seed] = audit_folder(work, seed, per_class=per_class, classes=classes, align=align)
        report["summary"] = summary(report["runs"])
        if json_path is not None:
            write_report(json_path, report)
    steps.close()
    return report


def summary(runs: dict) -> dict:
    recoveries = [run["recovery"] for run in runs.values()]
    hits = sum(round(r["recall"] * r["n_true"]) for r in recoveries if r["n_true"])
    found, true = sum(r["n_found"] for r in recoveries), sum(r["n_true"] for r in recoveries)
    walls = [run["wall_seconds"] for run in runs.values()]
    pooled = {"precision": hits / found if found else float("nan"), "recall": hits / true if true else float("nan")}
    return {**pooled, "false_found": found - hits,
            "max_wall_seconds": max(walls), "mean_wall_seconds": sum(walls) / len(walls),
            "cross_fitted": sum(run["cross_fitted"] for run in runs.values()),
            "met": _floors(pooled, found - hits, true, max(walls))}


def _floors(pooled: dict, false_found: int, true: int, wall: float) -> dict[str, bool]:
    found = ({"recall >= 0.9 (pooled)": pooled["recall"] >= FLOORS["recall"],
              "precision >= 0.8 (pooled)": pooled["precision"] >= FLOORS["precision"]} if true
             else {"no pair found (nothing planted)": false_found == 0})
    return {**found, "every audit <= 4 min": wall <= FLOORS["wall_seconds"]}
