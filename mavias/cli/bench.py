"""`mavias bench core|audit|folders|warm|criteria|discovery|pipeline|data|serve|scale`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mavias.cli.options import (
    Device,
    LeakOption,
    RelevanceOption,
    TaggerQualityOption,
    TagsOption,
    discovery_sources,
    writable_figure,
    writable_file,
)
from mavias.utils.console import make_console

app = typer.Typer(help="Benchmarks (speed and quality), recorded in BENCHMARKS.md.", no_args_is_help=True)
console = make_console()
JsonOut = Annotated[Path | None, typer.Option("--json", help="write the full results as JSON", callback=writable_file)]


@app.command("pipeline")
def pipeline_command(
    work: Annotated[Path, typer.Option(help="work folder of the demo it runs")] = Path("runs/bench-pipeline"),
    runs: Annotated[int, typer.Option(help="timed runs per batch size of the latency comparison", min=1)] = 50,
    threads: Annotated[int | None, typer.Option(help="CPU threads of both runtimes (default: all cores)",
                                                min=1)] = None,
    json_out: JsonOut = None,
) -> None:
    """The demo's two nights: wall time per task, night 2 vs night 1 work, ONNX vs PyTorch CPU latency."""
    from mavias.tools.bench.pipeline import run_pipeline_bench

    run_pipeline_bench(work, runs=runs, threads=threads, json_path=json_out)


def _pm(value: dict | None, scale: float = 100.0) -> str:
    return "-" if value is None else f"{scale * value['mean']:.1f} ± {scale * value['std']:.1f}"


def print_summary_table(title: str, summary: list[dict], columns: list[tuple[str, str, float]], *,
                        labels: tuple[str, ...] = ("method", "criterion")) -> None:
    """Mean ± sd over seeds per row of ``summary``, labelled by its ``labels`` ("criterion" headed "selection")."""
    table = Table(title=title)
    for label in labels:
        table.add_column("selection" if label == "criterion" else label)
    for header, _, _ in columns:
        table.add_column(header, justify="right")
    for row in summary:
        table.add_row(*(row[label] for label in labels), *(_pm(row.get(key), scale) for _, key, scale in columns))
    console.print(table)


IMAGE_COLUMNS = [("WG acc", "wg_acc", 100), ("balanced acc (mean over groups)", "avg_acc", 100),
                 ("open-set WG (label-free)", "openset_wg_acc", 100), ("test acc", "test_accuracy", 100),
                 ("BG gap", "bg_gap", 100), ("CoObj gap", "coobj_gap", 100)]
MOONS_COLUMNS = [("test acc (x3 shuffled)", "test_accuracy_x3_shuffled", 100), ("WG acc", "wg_acc", 100),
                 ("avg acc", "avg_acc", 100)]
Benchmarks = Annotated[list[str] | None, typer.Option("--benchmark", help="run only these (repeatable); default all")]


@app.command("core")
def core(
    seeds: Annotated[int, typer.Option(help="training seeds per method", min=1)] = 3,
    trials: Annotated[int, typer.Option(help="`mavias tune` trials per method and benchmark (on seed 0); 0: no "
                                        "search, each method's CLI defaults", min=0, max=1000)] = 6,
    benchmark: Benchmarks = None,
    method: Annotated[list[str] | None, typer.Option("--method", help="tune only these (repeatable: ERM, JTT, LfF, SD, "
                                                     "FLAC-B, DebiAN, MAVias, MAVias-PoE, MAVias-PoE-CF, GroupDRO); "
                                                     "default all but MAVias-PoE-CF")] = None,
    workers: Annotated[int, typer.Option(help="trainings run side by side (processes)", min=1)] = 2,
    json_out: JsonOut = None,
    work: Annotated[Path, typer.Option(help="working folder (data, runs, embeddings); resumes")] = Path("runs/bench-core"),
    moons: Annotated[bool, typer.Option(help="also the 3-D two moons of the supplement")] = True,
    tags: TagsOption = None,
    relevance: RelevanceOption = None,
    leak: LeakOption = 0,
    tagger_quality: TaggerQualityOption = "default",
    compute: Annotated[float | None, typer.Option(
        help="every tuned method's length as this multiple of the recipe's steps, the same for all (equal "
             "compute; a search then tries 0.5-1.5x of it for every method alike); default: a debiasing method's "
             "own length (3x) for every method, ERM's included",
        min=0.1)] = None,
    share: Annotated[float, typer.Option(
        help="share of each benchmark's training and validation images (the test split stays whole): a quicker, "
             "coarser bench; 0.5 ran one benchmark's whole comparison in 33 min on two cores and kept MAVias's "
             "verdicts against the peers, not the peers' order (BENCHMARKS.md)", min=0.01, max=1.0)] = 1.0,
) -> None:
    """Every method (ERM, JTT, LfF, SD, FLAC-B, DebiAN, MAVias as published, MAVias-PoE and its cross-fitted
    MAVias-PoE-CF, GroupDRO oracle) tuned with
    the same budget on every built-in benchmark, then its choice trained on every seed; tags from the benchmarks'
    taggers and relevance from the offline judge unless --tags / --relevance say otherwise."""
    from mavias.tools.bench.core import run_core_bench

    sources = discovery_sources(tags=tags, relevance=relevance, leak=leak, tagger_quality=tagger_quality)
    report = run_core_bench(work, seeds=seeds, trials=trials, benchmarks=benchmark, methods=method,
                            json_path=json_out, workers=workers, progress=True, moons=moons, sources=sources,
                            compute=compute, share=share)
    for name, result in report["benchmarks"].items():
        label = "held out" if result["held_out"] else "seen while choosing defaults"
        size = f"; {share:g} of its training and validation images" if share < 1 else ""
        print_summary_table(f"{name} ({label}{size}; test, %)", result["summary"], IMAGE_COLUMNS)
        console.print({"floors": result["floors"]["met"],
                       "MAVias - peer WG": result["floors"].get("mavias_minus_peer_wg"),
                       "tuned": {m: t["best_params"] for m, t in result["tuning"].items()},
                       "chosen": {m: t["choice"] for m, t in result["tuning"].items() if t["choice"]}})
    console.print({"MAVias >= every tuned peer on 2/3 of the benchmarks, within 3 points elsewhere":
                   report["peer_floor"]["met"]})
    if "two_moons_3d" in report:
        print_summary_table("two-moons-3d (test, %)", report["two_moons_3d"]["summary"], MOONS_COLUMNS,
                            labels=("method",))
        console.print(f"two-moons figure: {report['two_moons_3d']['figure']}")
    console.print(f"wall time {report['wall_seconds']:.0f} s")


@app.command("audit")
def audit(
    seeds: Annotated[int, typer.Option(help="ERM references per benchmark (B' precision / recall per seed)", min=1)] = 3,
    benchmark: Benchmarks = None,
    json_out: JsonOut = None,
    work: Annotated[Path, typer.Option(help="working folder (data, runs, embeddings); resumes")] = Path("runs/bench-audit"),
    tags: TagsOption = None,
    relevance: RelevanceOption = None,
    leak: LeakOption = 0,
    tagger_quality: TaggerQualityOption = "default",
) -> None:
    """How well the label-free audit finds each benchmark's shortcuts (B' precision / recall against the true
    shortcut tags), and how well its worst group tracks the true one over checkpoints of differing bias; tags from
    the benchmarks' taggers and relevance from the offline judge unless --tags / --relevance say otherwise."""
    from mavias.tools.bench.audit import run_audit_bench

    sources = discovery_sources(tags=tags, relevance=relevance, leak=leak, tagger_quality=tagger_quality)
    report = run_audit_bench(work, seeds=seeds, benchmarks=benchmark, json_path=json_out, progress=True,
                             sources=sources)
    table = Table(title="label-free audit (test; floors: recall >= 0.9, precision >= 0.8, rho >= 0.8, gap <= 10)")
    for column in ("benchmark", "B' precision / recall per seed", "paper rule P / R (seed 0)", "checkpoints",
                   "Spearman rho", "mean |gap| (points)", "floors met"):
        table.add_column(column)
    for name, result in report["benchmarks"].items():
        per_seed = ", ".join(f"{r['label_free']['precision']:.2f} / {r['label_free']['recall']:.2f}"
                             for r in result["recovery"].values())
        paper = result["recovery"][0]["paper"]
        agreed = result["agreement"]
        rho = "-" if agreed["spearman"] is None else f"{agreed['spearman']:.2f}"
        table.add_row(f"{name}{' (held out)' if result['held_out'] else ''}", per_seed,
                      f"{paper['precision']:.2f} / {paper['recall']:.2f}", str(agreed["n_checkpoints"]), rho,
                      f"{100 * agreed['mean_gap']:.1f}", str(all(result["floors"]["met"].values())))
    console.print(table)


@app.command("folders")
def folders(
    count: Annotated[int, typer.Option("--folders", help="generated folders (seeds 0..N-1), each audited", min=1)] = 5,
    per_class: Annotated[int, typer.Option(help="images per class", min=20)] = 200,
    classes: Annotated[int, typer.Option(help="classes (circle, square, triangle)", min=2, max=3)] = 3,
    align: Annotated[float, typer.Option(help="share of a class's images on its own colour (1 / classes or less: "
                                                "no shortcut planted)", min=0.0, max=1.0)] = 0.9,
    work: Annotated[Path, typer.Option(help="working folder (each folder is audited from scratch)")] = Path(
        "runs/bench-folders"),
    json_out: JsonOut = None,
) -> None:
    """`mavias audit` of small generated folders, one planted colour per class: B' precision / recall against the
    planted shortcuts, the pairs it could not decide, and the wall time of each audit."""
    from mavias.tools.bench.folders import run_folders_bench

    report = run_folders_bench(work, folders=count, per_class=per_class, classes=classes, align=align,
                               json_path=json_out, progress=True)
    table = Table(title=f"mavias audit of {classes} x {per_class}-image folders (floors: recall >= 0.9, precision "
                        ">= 0.8, <= 4 min each)")
    for column in ("folder", "B' precision / recall", "found", "undecided", "cross-fitted", "wall time"):
        table.add_column(column)
    for seed, run in report["runs"].items():
        found = run["recovery"]
        table.add_row(str(seed), f"{_score(found['precision'])} / {_score(found['recall'])}",
                      ", ".join(f"{c}: {t}" for c, t in run["found"]) or "-",
                      ", ".join(f"{c}: {t}" for c, t in run["undecided"]) or "-", "yes" if run["cross_fitted"] else "no",
                      f"{run['wall_seconds']:.0f} s")
    console.print(table)
    met = report["summary"]["met"]
    console.print(f"pooled precision {_score(report['summary']['precision'])}, recall "
                  f"{_score(report['summary']['recall'])}, "
                  f"{report['summary']['false_found']} false pair(s); "
                  + ", ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in met.items()))


@app.command("warm")
def warm(
    benchmark: Annotated[str, typer.Option(help="the built-in benchmark whose training split is dealt into 4 "
                                                "partitions")] = "synthetic-scenes",
    seed: Annotated[int, typer.Option(help="training seed (and the partitions')", min=0)] = 0,
    replay: Annotated[float, typer.Option(help="share of the old images' steps a warm night replays (the nightly "
                                               "train.warm_replay)", min=0.0, max=1.0)] = 0.25,
    work: Annotated[Path, typer.Option(help="working folder (resumes)")] = Path("runs/bench-warm"),
    json_out: JsonOut = None,
    tags: TagsOption = None,
    relevance: RelevanceOption = None,
) -> None:
    """Four nights of growing data: night 4 warm (from night 3) against night 4 from scratch: training time, the
    closed-set test worst group of the reference and MAVias, and B'."""
    from mavias.tools.bench.warm import run_warm_bench

    report = run_warm_bench(work, benchmark=benchmark, seed=seed, replay=replay, json_path=json_out, progress=True,
                            sources=discovery_sources(tags=tags, relevance=relevance))
    table = Table(title=f"{report['benchmark']}: nights of growing data, warm against cold (seed {seed})")
    for column in ("night", "training images", "share of cold steps", "epochs (ERM / MAVias)", "training time",
                   "WG ERM / MAVias (test, closed set)", "B'"):
        table.add_column(column)
    for name, night in report["nights"].items():
        worst = night["worst_group"]
        table.add_row(name, str(night["train_images"]), f"{night.get('fraction', 1.0):.2f}",
                      f"{night['epochs']['reference']} / {night['epochs']['mavias']}", f"{night['seconds']:.0f} s",
                      f"{100 * worst['reference']:.1f} / {100 * worst['mavias']:.1f}", ", ".join(night["biased"]) or "-")
    console.print(table)
    compared = report["comparison"]
    console.print(f"night 4 warm / cold: {compared['time_ratio']:.2f}x the time, MAVias WG "
                  f"{-compared['wg_drop_points']:+.1f} points, same B': {compared['same_biased_tags']}; "
                  + ", ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in compared["met"].items()))


def _score(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"  # NaN: nothing planted or nothing found


@app.command("criteria")
def criteria(
    benchmark: Annotated[str, typer.Option(help="the image benchmark to analyse")] = "shape-colours",
    seed: Annotated[int, typer.Option(help="training seed of every run", min=0)] = 0,
    work: Annotated[Path, typer.Option(help="working folder; bench core's by default, so its generated data is "
                                            "reused (the analysis trains a reference of its own)")] = Path("runs/bench-core"),
    json_out: JsonOut = None,
) -> None:
    """How well each selection criterion ranks checkpoints by test worst-group accuracy (analysis, 8 runs)."""
    from mavias.tools.bench.criteria import run_criteria_bench

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
    tag_images: Annotated[int, typer.Option(help="images to tag for the throughput figure", min=1)] = 16,
    device: Device = "auto",
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint for the LLM judge; default offline")] = None,
    llm_model: Annotated[str, typer.Option(help="model name at --base-url")] = "gpt-4o",
    json_out: JsonOut = None,
) -> None:
    """Tagger images/s, encodings/s with and without dedupe, LLM requests per class, judge precision/recall."""
    from mavias.tools.bench.discovery import run_discovery_bench

    run_discovery_bench(work, model=model, tag_images=tag_images, device=device, base_url=base_url, llm_model=llm_model,
                        json_path=json_out, console=console)


@app.command("scale")
def scale(
    work: Annotated[Path, typer.Option(help="working folder (data, workspaces, bucket server log)")] = Path(
        "runs/bench-scale"),
    scales: Annotated[str, typer.Option(help="comma-separated multiples of the base partition")] = "1,4,16",
    base: Annotated[int, typer.Option(min=40, help="training images of the 1x partition (validation: a quarter)")] = 240,
    json_out: JsonOut = None,
    plot: Annotated[Path | None, typer.Option(help="write the time and memory plot (.png, .svg or .pdf)",
                                              callback=writable_figure)] = None,
) -> None:
    """One night per data size (1x, 4x, 16x a partition): seconds and peak memory per step, the work done and the
    workspace's disk after the night."""
    from mavias.tools.bench.scale import STEPS, run_scale_bench

    multiples = _multiples(scales)
    runs = run_scale_bench(work, scales=multiples, base=base, json_path=json_out, plot_path=plot)
    table = Table(title="a night against its data size: seconds (peak RSS MiB) per step")
    table.add_column("step")
    for run in runs:
        table.add_column(f"{run.scale}x ({run.images} images)", justify="right")
    for step in STEPS:
        table.add_row(step, *(f"{run.steps[step]['seconds']:.1f} ({run.steps[step]['peak_mib']:.0f})" for run in runs))
    for key in runs[0].work:
        table.add_row(key, *(str(run.work[key]) for run in runs))
    for folder in runs[-1].disk:
        table.add_row(f"disk: {folder} (MiB)", *(f"{run.disk.get(folder, 0) / 2**20:.1f}" for run in runs))
    console.print(table)


def _multiples(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise typer.BadParameter(f"--scales takes positive integers separated by commas, e.g. 1,4,16 (got {text!r})")
    return values


@app.command("data")
def data(
    work: Annotated[Path, typer.Option(help="working folder (generated trees, runs)")] = Path("runs/bench-data"),
    n_files: Annotated[int, typer.Option(help="generated images per layout for the import speed", min=1)] = 10_000,
    batches: Annotated[int, typer.Option(help="training batches per method (at least 2: the recipe halves a batch "
                                         "of more than half the images, which the report would not say)",
                                         min=2)] = 16,
    batch_size: Annotated[int, typer.Option(help="training batch size", min=1)] = 32,
    image_size: Annotated[int, typer.Option(help="training image size", min=8)] = 224,
    device: Device = "auto",
    json_out: JsonOut = None,
) -> None:
    """Import speed (imagefolder, Waterbirds) and ResNet-18 training throughput, ERM vs MAVias."""
    from mavias.tools.bench.data import run_data_bench

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
    json_out: JsonOut = None,
) -> None:
    """The model server's requests/s and p50/p99 latency at batch 1 and 32 (CPU; tritonclient, a lean gRPC
    client and a lean REST client) vs a bare ONNX Runtime call; liveness latency under 8 maximum-size clients; peak
    RSS under image bombs."""
    from mavias.tools.bench.serve import run_serve_bench
    from mavias.utils.atomic import write_report

    report = run_serve_bench(model_dir, seconds=seconds, max_requests=max_requests, work=work)
    table = Table(title=f"mavias serve ({report['providers'][0]}; load average "
                        f"{report['load_average']['start'][0]:.1f})")
    for column in ("batch", "caller", "req/s", "p50 ms", "p99 ms", "p50 overhead ms"):
        table.add_column(column, justify="right")
    for row in report["results"]:
        overheads = {**row["overhead_ms"], "floor server": row["floor_overhead_ms"]}
        for caller, times in [("bare onnxruntime", row["bare_onnxruntime"]), *row["clients"].items(),
                              ("floor server", row["floor_server"])]:
            overhead = overheads.get(caller)
            table.add_row(str(row["batch"]), caller, f"{times['requests_per_s']:.1f}", f"{times['p50_ms']:.2f}",
                          f"{times['p99_ms']:.2f}", "" if overhead is None else f"{overhead:.2f}")
    console.print(table)
    for row in report["results"]:
        share, outside = row["server_handling"], row["transport_and_client_ms"]
        console.print(f"batch {row['batch']}: the server's own handling p50 {share['handler_p50_ms']:.3f} ms against "
                      f"{share['bare_p50_ms']:.3f} ms for session.run in the same process (overhead "
                      f"{share['overhead_ms']:.3f} ms); transport and client: "
                      + ", ".join(f"{client} {value:.3f} ms" for client, value in outside.items()))
    first = report["results"][0]
    console.print(f"goal: {report['goal']}: {'met' if report['meets_goal'] else 'NOT met'} ("
                  + ", ".join(f"{client} {value:.2f} ms" for client, value in first["overhead_ms"].items()) + ")")
    console.print(f"floor: the thinnest Python gRPC server with the same session.run costs "
                  f"{first['floor_overhead_ms']:.2f} ms over it at batch {first['batch']}; mavias serve adds "
                  f"{first['over_floor_ms']:.2f} ms to that floor")
    live, bombs = report["liveness_under_load"], report["bombs"]
    console.print(f"liveness while {live['clients']} clients send {live['request']}: p50 {live['p50_ms']:.1f} ms, "
                  f"p99 {live['p99_ms']:.1f} ms, max {live['max_ms']:.1f} ms ({live['probes']} probes, failed "
                  f"{live['failed_probes'] or 'none'}; infer statuses {live['infer_statuses']}); goal p99 <= "
                  f"{live['goal_p99_ms']:g} ms and every probe answered: {'met' if live['meets_goal'] else 'NOT met'}")
    console.print(f"image bombs: peak RSS {bombs['peak_rss_mib']:.0f} MiB (baseline {bombs['baseline_rss_mib']:.0f} "
                  f"MiB); statuses {bombs['statuses']}" + ("" if bombs["server_alive"] else "; the server DIED"))
    if json_out is not None:
        write_report(json_out, report)
