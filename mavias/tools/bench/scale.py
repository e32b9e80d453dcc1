"""`mavias bench scale`: the cost of a night against the size of its data.

One night (one new partition, a fresh workspace and bucket) per scale: 1x, 4x, 16x a base partition of
synthetic-scenes. Every step runs the nightly stage function in a fresh process, as an Airflow task does, timed
around the call (imports excluded) with the process's peak RSS (imports included: what a task's worker must hold).
Tagging and encoding must grow with the unique new images and tag sets (the counts are reported beside the
times), training with the images trained on (a fixed number of epochs). The night ends with retention
(``clean_up``); what the workspace then holds, per top-level folder, is the disk the night costs.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib
import yaml

from mavias.ops.nightly.config import load_nightly_config
from mavias.storage.s3 import ENV_PREFIX, make_s3_client
from mavias.tools.demo.run import make_demo_data, upload_manifest_folder
from mavias.tools.demo.services import CREDENTIALS, demo_s3_settings, moto_server
from mavias.utils.atomic import write_report
from mavias.utils.disk import tree_size

SCALE_TRAINING = {"image_size": 32, "epochs": 3, "batch_size": 64, "backbone.width": 16, "optim.name": "sgd",
                  "optim.lr": 0.05, "optim.schedule": "none", "device": "auto"}
BUCKET = "mavias-scale"
NIGHT = datetime(2025, 3, 1, tzinfo=UTC)


def _sense_and_validate(cfg, _: dict) -> dict:  # noqa: ANN001 - NightlyConfig (imported in the step's process)
    from mavias.ops.nightly import ingest

    return {"validated": ingest.pull_and_validate(cfg, ingest.sense(cfg, NIGHT))}


def _tag(cfg, done: dict) -> dict:  # noqa: ANN001
    from mavias.ops.nightly import discover, tagging_plan

    return {"tagged": [discover.tag_shards(cfg, batch) for batch in tagging_plan.plan_tagging(cfg, done["validated"])]}


def _judge_and_encode(cfg, done: dict) -> dict:  # noqa: ANN001
    from mavias.ops.nightly import discover

    return {"discovered": discover.discover(cfg, done["validated"], done["tagged"])}


def _prepare(cfg, done: dict) -> dict:  # noqa: ANN001
    from mavias.ops.nightly import dataset

    return {"dataset": dataset.prepare_dataset(cfg, done["validated"])}


def _train_reference(cfg, done: dict) -> dict:  # noqa: ANN001
    from mavias.ops.nightly import train

    return {"reference": train.train_reference_model(cfg, done["dataset"])}


def _train_mavias(cfg, done: dict) -> dict:  # noqa: ANN001
    from mavias.ops.nightly import train, trial_plan

    trials = [train.run_trial(cfg, done["dataset"], done["reference"], job)
              for job in trial_plan.plan_trials(cfg, done["dataset"], done["reference"])]
    return {"candidate": train.select_candidate(cfg, done["dataset"], done["reference"], trials)}


def _evaluate(cfg, done: dict) -> dict:  # noqa: ANN001
    from mavias.ops.nightly import evaluate

    return {"evaluated": evaluate.evaluate(cfg, done["dataset"], done["reference"], done["candidate"])}


def _clean_up(cfg, done: dict) -> dict:  # noqa: ANN001
    from mavias.ops.nightly import retention

    return {"pruned": retention.clean_up(cfg, done["validated"]["night"], done["dataset"]["digest"])}


STEPS: dict[str, Callable[[Any, dict], dict]] = {
    "sense + pull_and_validate": _sense_and_validate, "tag": _tag, "judge + encode": _judge_and_encode,
    "prepare_dataset": _prepare, "train_reference": _train_reference, "train_mavias": _train_mavias,
    "evaluate": _evaluate, "clean_up": _clean_up,
}


def disk_use(workspace: Path) -> dict[str, int]:
    """Bytes under each top-level folder of a workspace, and "total" (with the files directly in it)."""
    use = {path.name: tree_size(path) for path in sorted(workspace.iterdir()) if path.is_dir()}
    return use | {"total": tree_size(workspace)}


def _set_environment(values: dict[str, str]) -> None:
    os.environ.update(values)


def _run_step(config_path: str, name: str, done: dict) -> tuple[dict, float, float]:
    """In a fresh process: the step's outputs, its seconds and the process's peak RSS (MiB)."""
    cfg = load_nightly_config(config_path)
    started = time.perf_counter()
    outputs = STEPS[name](cfg, done)
    seconds = time.perf_counter() - started
    return outputs, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class ScaleRun:
    scale: int
    images: int
    steps: dict[str, dict[str, float]]  # step -> seconds, peak_mib
    work: dict[str, int]
    disk: dict[str, int]  # bytes per workspace folder after the night (see disk_use)


def run_night(work: Path, endpoint: str, scale: int, base: int) -> ScaleRun:
    """One night on a partition of ``scale`` x ``base`` train/val images, in its own workspace and bucket."""
    root = work / f"x{scale}"
    for stale in ("workspace", "staging"):  # a night's work is measured from scratch
        shutil.rmtree(root / stale, ignore_errors=True)
    n_train = scale * base
    data = make_demo_data(root / "data", n_train=n_train, n_val=n_train // 4, n_test_per_cell=2, nights=1,
                          bg_align=0.95, coobj_align=0.95)
    settings = demo_s3_settings(f"{BUCKET}-x{scale}", endpoint)
    client = make_s3_client(settings)
    client.create_bucket(Bucket=settings.bucket)
    upload_manifest_folder(client, settings, "evaluation/v1/", data.root, data.evaluation, root / "staging" / "eval")
    (name, rows), = data.partitions.items()
    upload_manifest_folder(client, settings, f"incoming/{name}/", data.root, rows, root / "staging" / name)
    config = root / "nightly.yaml"
    config.write_text(yaml.safe_dump({
        "model_name": "scale", "workspace": str(root / "workspace"),
        "s3": {"bucket": settings.bucket, "endpoint_url": endpoint},
        "train": {"overrides": SCALE_TRAINING}, "discovery": {"tagger": "manifest", "num_shards": 2},
        "evaluation": {"version": "v1", "n_boot": 100},
    }))
    credentials = {f"{ENV_PREFIX}{key.upper()}": value for key, value in CREDENTIALS.items()}  # never in the file
    done: dict = {}
    steps = {}
    for step in STEPS:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_set_environment,
                                 initargs=(credentials,)) as pool:
            outputs, seconds, peak = pool.submit(_run_step, str(config), step, done).result()
        done |= outputs
        steps[step] = {"seconds": round(seconds, 2), "peak_mib": round(peak)}
    discovered, sizes = done["discovered"], done["dataset"]["sizes"]
    counts = {"images tagged": discovered["images_tagged"], "tag sets encoded": discovered["prompts_encoded"],
              "images trained on": sizes.get("train", 0) + sizes.get("val", 0)}
    return ScaleRun(scale, len(rows), steps, counts, disk_use(root / "workspace"))


def plot(runs: list[ScaleRun], path: Path) -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right, disk) = plt.subplots(1, 3, figsize=(16, 4))
    images = [run.images for run in runs]
    for step in STEPS:
        left.plot(images, [run.steps[step]["seconds"] for run in runs], marker="o", label=step)
        right.plot(images, [run.steps[step]["peak_mib"] for run in runs], marker="o", label=step)
    for folder in runs[-1].disk:
        disk.plot(images, [run.disk.get(folder, 0) / 2**20 for run in runs], marker="o", label=folder)
    disk.set(xscale="log", yscale="log", xlabel="images in the night's partition", ylabel="MiB",
             title="workspace on disk after the night")
    disk.legend(fontsize=7)
    left.set(xscale="log", yscale="log", xlabel="images in the night's partition", ylabel="seconds",
             title="time per step")
    right.set(xscale="log", xlabel="images in the night's partition", ylabel="peak RSS of the step's process (MiB)",
              title="peak memory per step")
    for axis in (left, right, disk):
        axis.set_xticks(images, [str(n) for n in images])
        axis.minorticks_off()
    left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_scale_bench(work: str | Path, *, scales: list[int], base: int, json_path: Path | None = None,
                    plot_path: Path | None = None) -> list[ScaleRun]:
    work = Path(work).resolve()
    with moto_server(work / "moto_server.log") as endpoint:
        runs = [run_night(work, endpoint, scale, base) for scale in scales]
    if json_path is not None:
        write_report(json_path, [run.__dict__ for run in runs])
    if plot_path is not None:
        plot(runs, plot_path)
    return runs
