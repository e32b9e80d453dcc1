"""`mavias bench pipeline`: the demo's two nights, measured.

- wall time of every task of both nights (from Airflow's metadata DB) and of the whole demo;
- the work counts of night 2 against night 1 (discovery is incremental; training uses all accumulated data);
- ONNX Runtime against PyTorch eager, CPU, batch 1 and 32, on the promoted model (else the last candidate), at the
  same thread count (goal: ONNX <= 0.7 x eager).
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from mavias.core.train.checkpoints import load_main_model
from mavias.errors import ExplainedFailure
from mavias.ops.export.latency import export_latency_benchmark
from mavias.tools.demo.run import DemoResult, print_summary, run_demo
from mavias.utils.atomic import write_report
from mavias.utils.console import make_console


def benchmarked_checkpoint(result: DemoResult) -> Path:
    """The promoted model's checkpoint, else the last night's packaged candidate."""
    packaged = [run.results["package"] for run in result.nights if run.results.get("package")]
    if not packaged:
        raise ExplainedFailure("no night produced a candidate model; see the night logs")
    promoted = [p for p in packaged if p["version"] == result.production_version]
    return Path((promoted or packaged)[-1]["dir"]) / "model.pt"


def _task_seconds(result: DemoResult) -> dict[str, dict[str, float | None]]:
    per_night = {}
    for run in result.nights:
        seconds = run.tasks.groupby("task_id", sort=False)["duration_s"].sum(min_count=1)
        per_night[f"night {run.night}"] = {task: None if pd.isna(s) else round(float(s), 2) for task, s in seconds.items()}
    return per_night


def _latency(checkpoint: Path, runs: int, threads: int) -> dict[str, Any]:
    model, _, cfg = load_main_model(checkpoint)
    return export_latency_benchmark(model, cfg.image_size, runs=runs, threads=threads)


def measure_latency(checkpoint: Path, *, runs: int, threads: int) -> dict[str, Any]:
    """ONNX vs eager in a fresh interpreter: measured inside the long-lived demo process, eager PyTorch was ~300x
    slower at batch 1 (124 ms against 0.35 ms) on two cores, which would flatter ONNX Runtime."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_latency, (checkpoint, runs, threads))


def latency_table(latency: dict[str, Any]) -> Table:
    table = Table(title=f"CPU latency, {latency['threads']} thread(s), {latency['image_size']} px "
                        f"(goal ONNX <= {latency['goal_ratio']} x eager)")
    for column in ("batch", "PyTorch eager (ms)", "ONNX Runtime (ms)", "ratio"):
        table.add_column(column, justify="right")
    for row in latency["results"]:
        table.add_row(str(row["batch"]), f"{row['torch_eager_ms']:.2f}", f"{row['onnx_ms']:.2f}", f"{row['ratio']:.2f}")
    return table


def run_pipeline_bench(
    work: str | Path,
    *,
    runs: int = 50,
    threads: int | None = None,
    json_path: str | Path | None = None,
    console: Console | None = None,
    **demo_options: Any,
) -> dict[str, Any]:
    """Run the demo in ``work`` and measure it; the results as a dict (also written to ``json_path``)."""
    console = console or make_console()
    result = run_demo(work, console=console, **demo_options)
    latency = measure_latency(benchmarked_checkpoint(result), runs=runs, threads=threads or os.cpu_count() or 1)
    report = {
        "demo_wall_seconds": round(result.wall_s, 1),
        "setup_seconds": {name: round(s, 1) for name, s in result.timings.items()},
        "night_wall_seconds": {f"night {run.night}": round(run.wall_s, 1) for run in result.nights},
        "task_seconds": _task_seconds(result),
        "work": {f"night {run.night}": result.counts(run.night) for run in result.nights},
        "latency": latency,
        "production_version": result.production_version,
    }
    print_summary(result, console)
    console.print(latency_table(latency))
    if json_path is not None:
        write_report(json_path, report)
    return report
