"""`mavias bench core|criteria|discovery|pipeline|data|serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mavias.utils.console import make_console

app = typer.Typer(help="Benchmarks (speed and quality), recorded in BENCHMARKS.md.", no_args_is_help=True)
console = make_console()


@app.command("pipeline")
def pipeline_command(
    work: Annotated[Path, typer.Option(help="work folder of the demo it runs")] = Path("runs/bench-pipeline"),
    runs: Annotated[int, typer.Option(help="timed runs per batch size of the latency comparison")] = 50,
    threads: Annotated[int | None, typer.Option(help="CPU threads of both runtimes (default: all cores)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
) -> None:
    """The demo's two nights: wall time per task, night 2 vs night 1 work, ONNX vs PyTorch CPU latency."""
    from mavias.bench.pipeline import run_pipeline_bench

    run_pipeline_bench(work, runs=runs, threads=threads, json_path=json_out)


def _pm(value: dict | None, scale: float = 100.0) -> str:
    return "-" if value is None else f"{scale * value['mean']:.1f} ± {scale * value['std']:.1f}"


def print_core_table(title: str, summary: list[dict], columns: list[tuple[str, str, float]]) -> None:
    table = Table(title=title)
    table.add_column("method")
    table.add_column("selection")
    for header, _, _ in columns:
        table.add_column(header, justify="right")
    for row in summary:
        table.add_row(row["method"], row["criterion"], *(_pm(row.get(key), scale) for _, key, scale in columns))
    console.print(table)


IMAGE_COLUMNS = [("WG acc", "wg_acc", 100), ("balanced acc (mean over groups)", "avg_acc", 100),
                 ("open-set WG", "openset_wg_acc", 100), ("test acc", "test_accuracy", 100),
                 ("BG gap", "bg_gap", 100), ("CoObj gap", "coobj_gap", 100), ("s/epoch", "seconds_per_epoch", 1)]
MOONS_COLUMNS = [("test acc (x3 shuffled)", "test_accuracy_x3_shuffled", 100), ("WG acc", "wg_acc", 100),
                 ("avg acc", "avg_acc", 100), ("s/epoch", "seconds_per_epoch", 1)]


@app.command("core")
def core(
    seeds: Annotated[int, typer.Option(help="training seeds per method", min=1)] = 3,
    trials: Annotated[int, typer.Option(help="`mavias tune` trials per benchmark (on seed 0)", min=1)] = 6,
    benchmark: Annotated[list[str] | None, typer.Option(help="run only these (repeatable); default all")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the full results as JSON")] = None,
    work: Annotated[Path, typer.Option(help="working folder (data, runs, embeddings)")] = Path("runs/bench-core"),
    encoder: Annotated[str, typer.Option(help="text encoder of the bias embeddings: minilm or openclip:<model>/<pretrained>")] = "minilm",
) -> None:
    """ERM, JTT, LfF, SD, FLAC-B, DebiAN, GroupDRO-oracle and tuned MAVias on every built-in benchmark."""
    from mavias.bench.core import run_core_bench

    report = run_core_bench(work, seeds=seeds, trials=trials, benchmarks=benchmark, json_path=json_out, encoder=encoder,
                            progress=True)
    for name, result in report["benchmarks"].items():
        label = "held out" if result["held_out"] else "seen while choosing defaults"
        print_core_table(f"{name} ({label}; test, %)", result["summary"], IMAGE_COLUMNS)
        console.print({"tuned MAVias": result["tuning"]["best_params"], "floors": result["floors"]["met"],
                       "B' precision/recall (seed 0)": {rule: (q["precision"], q["recall"])
                                                        for rule, q in result["biased_tags"][0].items()}})
    if "two_moons_3d" in report:
        print_core_table("two-moons-3d (test, %)", report["two_moons_3d"]["summary"], MOONS_COLUMNS)
        console.print(f"two-moons figure: {report['two_moons_3d']['figure']}")
    console.print(f"wall time {report['wall_seconds']:.0f} s")


@app.command("criteria")
def criteria(
    benchmark: Annotated[str, typer.Option(help="the image benchmark to analyse")] = "shape-colours",
    seed: Annotated[int, typer.Option(help="training seed of every run", min=0)] = 0,
    work: Annotated[Path, typer.Option(help="working folder; bench core's by default, so its data and reference are "
                                            "reused")] = Path("runs/bench-core"),
    json_out: Annotated[Path | None, typer.Option("--json", help="write the results (every checkpoint) as JSON")] = None,
) -> None:
    """How well each selection criterion ranks checkpoints by test worst-group accuracy (analysis, 8 runs)."""
    from mavias.bench.criteria import run_criteria_bench

    report = run_criteria_bench(work, benchmark=benchmark, seed=seed, json_path=json_out, progress=True)
    label = "held out" if report["held_out"] else "seen while choosing defaults"
    table = Table(title=f"{benchmark} seed {seed} ({label}): {report['checkpoints']} checkpoints")
    for column in ("criterion", "Spearman with test WG", "picks among MAVias runs", "epoch", "test WG", "test balanced"):
        table.add_column(column, justify="left" if column.startswith(("criterion", "picks")) else "right")
    for pick in report["picks"]:
        table.add_row(pick["criterion"], f"{report['spearman'][pick['criterion']]:.2f}", pick["run"], str(pick["epoch"]),
                      f"{100 * pick['test_wg']:.1f}", f"{100 * pick['test_balanced']:.1f}")
    console.print(table)
    console.print("validation images each pooled criterion reads: "
                  + ", ".join(f"{name} {count}" for name, count in report["pooled_images"].items()))
    console.print(f"wall time {report['wall_seconds']:.0f} s")


@app.command("discovery")
def discovery(
    work: Annotated[Path, typer.Option(help="working folder")] = Path("runs/bench-discovery"),
    model: Annotated[str, typer.Option(help="OpenCLIP architecture of the tagger (random init unless weights are cached)")] = "ViT-L-14",
    tag_images: Annotated[int, typer.Option(help="images to tag for the throughput figure")] = 16,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint for the LLM judge; default offline")] = None,
    llm_model: Annotated[str, typer.Option(help="model name at --base-url")] = "gpt-4o",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
) -> None:
    """Tagger images/s, encodings/s with and without dedupe, LLM requests per class, judge precision/recall."""
    from mavias.bench.discovery import run_discovery_bench

    run_discovery_bench(work, model=model, tag_images=tag_images, device=device, base_url=base_url, llm_model=llm_model,
                        json_path=json_out, console=console)


@app.command("data")
def data(
    work: Annotated[Path, typer.Option(help="working folder (generated trees, runs)")] = Path("runs/bench-data"),
    n_files: Annotated[int, typer.Option(help="generated images per layout for the import speed")] = 10_000,
    batches: Annotated[int, typer.Option(help="training batches per method")] = 16,
    batch_size: Annotated[int, typer.Option(help="training batch size")] = 32,
    image_size: Annotated[int, typer.Option(help="training image size")] = 224,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
) -> None:
    """Import speed (imagefolder, Waterbirds) and ResNet-18 training throughput, ERM vs MAVias."""
    from mavias.bench.data import run_data_bench

    report = run_data_bench(work, n_files=n_files, batches=batches, batch_size=batch_size, image_size=image_size,
                            device=device, json_path=json_out)
    console.print(report)


@app.command("serve")
def serve(
    model_dir: Annotated[Path | None, typer.Option(help="a version folder to serve; default: the demo's architecture, "
                                                        "random weights")] = None,
    seconds: Annotated[float, typer.Option(help="time budget per measurement")] = 5.0,
    max_requests: Annotated[int, typer.Option(help="request budget per measurement")] = 2000,
    work: Annotated[Path, typer.Option(help="working folder (server log)")] = Path("runs/bench-serve"),
    json_out: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
) -> None:
    """The model server's requests/s and p50/p99 latency at batch 1 and 32 (CPU) vs a bare ONNX Runtime call;
    liveness latency under 8 maximum-size clients; peak RSS under image bombs."""
    from mavias.bench.serve import run_serve_bench
    from mavias.utils.atomic import write_json

    report = run_serve_bench(model_dir, seconds=seconds, max_requests=max_requests, work=work)
    table = Table(title=f"mavias serve ({report['client']}, {report['providers'][0]})")
    for column in ("batch", "server req/s", "server p50 ms", "server p99 ms", "bare req/s", "bare p50 ms", "bare p99 ms"):
        table.add_column(column, justify="right")
    for row in report["results"]:
        server, bare = row["server"], row["bare_onnxruntime"]
        table.add_row(str(row["batch"]), *(f"{v:.1f}" if "req" in k else f"{v:.2f}" for k, v in [
            ("req", server["requests_per_s"]), ("p50", server["p50_ms"]), ("p99", server["p99_ms"]),
            ("req", bare["requests_per_s"]), ("p50", bare["p50_ms"]), ("p99", bare["p99_ms"])]))
    console.print(table)
    console.print(f"goal: {report['goal']}: {'met' if report['meets_goal'] else 'NOT met'} "
                  f"({report['results'][0]['overhead_ms']:.2f} ms)")
    live, bombs = report["liveness_under_load"], report["bombs"]
    console.print(f"liveness while {live['clients']} clients send {live['request']}: p50 {live['p50_ms']:.1f} ms, "
                  f"p99 {live['p99_ms']:.1f} ms, max {live['max_ms']:.1f} ms ({live['probes']} probes; infer "
                  f"statuses {live['infer_statuses']})")
    console.print(f"image bombs: peak RSS {bombs['peak_rss_mib']:.0f} MiB (baseline {bombs['baseline_rss_mib']:.0f} "
                  f"MiB); statuses {bombs['statuses']}")
    if json_out is not None:
        write_json(json_out, report)
