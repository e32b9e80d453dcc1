"""`mavias demo`: two nights of the nightly DAG on this machine (see :mod:`mavias.tools.demo`), and its printout."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mavias.errors import UserError
from mavias.ops.registry import ModelRegistry
from mavias.storage.s3 import S3Settings, download_file, list_objects, make_s3_client, upload_dir, upload_file
from mavias.tools.demo.services import (
    DAG_ID,
    NightRun,
    airflow_environment,
    airflow_setup,
    demo_s3_settings,
    moto_server,
    read_night,
    run_airflow,
    smtp_server,
)
from mavias.utils.console import make_console

BUCKET = "mavias-demo"
MODEL_NAME = "mavias-scenes"
RECIPIENTS = ["ml-team@example.com"]
DEMO_GATES = Path(__file__).with_name("demo_gates.yaml")
DEMO_BIAS = 0.95  # P(background / co-object aligned with the class), as in UrbanCars and the built-in benchmark
DEMO_IMAGE_SIZE = 32  # drawn at the size the built-in benchmark trains at, so the recipe's own choices fit two cores
FIRST_NIGHT = date(2025, 1, 1)
DEMO_MARKER = ".mavias-demo"  # a work folder the demo made, whose pipeline folders it may empty


# -- data -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoData:
    root: Path
    evaluation: pd.DataFrame
    partitions: dict[str, pd.DataFrame]  # name -> manifest rows (uris relative to root)


def make_demo_data(root: Path, *, n_train: int, n_val: int, n_test_per_cell: int, nights: int = 2, seed: int = 0,
                   **scene_options: Any) -> DemoData:
    """synthetic-scenes with its train/val images split by sample over ``nights`` partitions."""
    from mavias.core.synthetic import SyntheticScenesConfig, make_synthetic_scenes  # torch and scikit-learn: on use

    cfg = SyntheticScenesConfig(n_train=n_train, n_val=n_val, n_test_per_cell=n_test_per_cell, seed=seed,
                                **scene_options)
    manifest = pd.read_parquet(root / "manifest.parquet") if (root / "manifest.parquet").exists() else None
    if manifest is None or json.loads((root / "benchmark.json").read_text())["config"] != cfg.model_dump(mode="json"):
        manifest = pd.read_parquet(make_synthetic_scenes(root, cfg))
    pool = manifest[manifest["split"] != "test"].sample(frac=1.0, random_state=seed).reset_index(drop=True)
    partitions = {f"night-{i + 1}": pool.iloc[i::nights].reset_index(drop=True) for i in range(nights)}
    return DemoData(root, manifest[manifest["split"] == "test"].reset_index(drop=True), partitions)


def upload_manifest_folder(client: Any, settings: S3Settings, prefix: str, root: Path, rows: pd.DataFrame,
                           staging: Path) -> None:
    """Upload the images ``rows`` reference, then (last, as producers must) their manifest, under ``prefix``."""
    for uri in rows["uri"]:
        target = staging / uri
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(root / uri, target)
            except OSError:  # another file system
                shutil.copyfile(root / uri, target)
    upload_dir(client, settings, staging, prefix)
    manifest = staging.parent / f"{staging.name}-manifest.parquet"
    rows.to_parquet(manifest, index=False)
    upload_file(client, settings, manifest, f"{prefix}manifest.parquet")


# -- the demo -------------------------------------------------------------------------------------------------------


@dataclass
class DemoResult:
    workdir: Path
    nights: list[NightRun]
    reports: list[Path]
    emails: list[Path]
    production_version: str | None
    onnx_uri: str | None
    onnx_local: Path | None
    registry_history: list[dict[str, Any]]
    wall_s: float
    timings: dict[str, float] = field(default_factory=dict)

    def counts(self, night: int) -> dict[str, int]:
        """Work done in a night: images tagged, judge requests, prompts encoded, images trained on."""
        results = self.nights[night - 1].results
        discovered = results.get("discover") or {}
        dataset = results.get("prepare_dataset") or {}
        return {
            "images tagged": discovered.get("images_tagged", 0),
            "judge requests": discovered.get("llm_requests", 0),
            "tags judged": discovered.get("tags_judged", 0),
            "prompts encoded": discovered.get("prompts_encoded", 0),
            "partitions discovered": len(discovered.get("partitions", [])),
            "images trained on": sum(v for k, v in dataset.get("sizes", {}).items() if k in ("train", "val")),
        }


def demo_config(workdir: Path, s3_endpoint: str, *, epochs: int | None = None) -> dict[str, Any]:
    """The nightly config of the demo: the training settings a user gets (the recipe's), ``epochs`` if given."""
    return {
        "model_name": MODEL_NAME,
        "workspace": str(workdir / "workspace"),
        "s3": {"bucket": BUCKET, "endpoint_url": s3_endpoint},
        "train": {"overrides": {} if epochs is None else {"epochs": epochs}},
        "discovery": {"tagger": "manifest", "judge": "offline", "num_shards": 2},
        "evaluation": {"version": "v1", "n_boot": 200, "closed_set_attrs": ["attr_bg_aligned", "attr_coobj_aligned"]},
        "gates": str(DEMO_GATES),
        "report": {"recipients": RECIPIENTS, "latency_runs": 10},
        "airflow": {"schedule": "@daily", "retries": 1, "retry_delay_s": 2, "max_retry_delay_s": 10},
    }


def _registry_state(settings: S3Settings, workdir: Path) -> tuple[str | None, str | None, Path | None, list[dict]]:
    """Production, its ONNX URI, a local copy of the models folder (the S3 server stops with the demo), history."""
    client = make_s3_client(settings)
    registry = ModelRegistry(client, settings, MODEL_NAME)
    for obj in list_objects(client, settings, registry.prefix):
        download_file(client, settings, obj.key, workdir / "bucket" / obj.key)
    production = registry.production()
    history = [r.model_dump(mode="json") for r in registry.history()]
    if production is None:
        return None, None, None, history
    local = workdir / "bucket" / registry.prefix / production.version / "model.onnx"
    return production.version, f"{registry.version_uri(production.version)}model.onnx", local, history


def run_demo(
    workdir: str | Path,
    *,
    n_train: int = 4000,
    n_val: int = 1200,
    n_test_per_cell: int = 20,
    epochs: int | None = None,
    console: Console | None = None,
) -> DemoResult:
    """Run the demo in ``workdir`` (created; a previous demo's data is reused, its S3 and Airflow state is not)."""
    console = console or make_console()
    workdir = Path(workdir).resolve()
    started = time.perf_counter()
    timings: dict[str, float] = {}

    def step(name: str):  # noqa: ANN202 - a context manager timing one demo step
        return _timed(console, name, timings)

    _claim(workdir)
    with step("generate synthetic-scenes"):
        data = make_demo_data(workdir / "data", n_train=n_train, n_val=n_val, n_test_per_cell=n_test_per_cell,
                              bg_align=DEMO_BIAS, coobj_align=DEMO_BIAS, image_size=DEMO_IMAGE_SIZE)
    _fresh(workdir)
    with ExitStack() as servers:
        endpoint = servers.enter_context(moto_server(workdir / "logs" / "moto_server.log"))
        smtp_port = servers.enter_context(smtp_server(workdir / "mail"))
        settings = demo_s3_settings(BUCKET, endpoint)
        client = make_s3_client(settings)
        client.create_bucket(Bucket=BUCKET)
        config_path = workdir / "nightly.yaml"
        config_path.write_text(yaml.safe_dump(demo_config(workdir, endpoint, epochs=epochs), sort_keys=False))
        env = airflow_environment(workdir / "airflow", config_path, endpoint, smtp_port)
        with step("upload the evaluation set (evaluation/v1)"):
            upload_manifest_folder(client, settings, "evaluation/v1/", data.root, data.evaluation,
                                   workdir / "staging" / "evaluation")
        with step("airflow db migrate + gpu pool"):
            airflow_setup(env, workdir / "logs")
        nights = []
        for index, (name, rows) in enumerate(data.partitions.items(), start=1):
            with step(f"upload partition incoming/{name}/ ({len(rows)} images)"):
                upload_manifest_folder(client, settings, f"incoming/{name}/", data.root, rows, workdir / "staging" / name)
            nights.append(_run_night(console, env, workdir, index, FIRST_NIGHT + timedelta(days=index - 1)))
        production, onnx_uri, onnx_local, history = _registry_state(settings, workdir)
    reports = sorted((workdir / "workspace" / "nights").glob("*/report/attempt-*/report.html"))
    return DemoResult(workdir, nights, reports, sorted((workdir / "mail").glob("*.eml")), production, onnx_uri,
                      onnx_local, history, time.perf_counter() - started, timings)


def _claim(workdir: Path) -> None:
    """Make ``workdir`` the demo's, or refuse a folder of the user's: each run empties its pipeline folders."""
    earlier = (workdir / "nightly.yaml").is_file() and (workdir / "data").is_dir()  # a demo of an earlier version
    if workdir.is_dir() and any(workdir.iterdir()) and not (workdir / DEMO_MARKER).exists() and not earlier:
        raise UserError(f"{workdir} holds files and is no demo folder: the demo empties its airflow/, workspace/, "
                        "mail/, staging/, bucket/ and logs/ on every run", hint="pass a new or empty --workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / DEMO_MARKER).touch()


def _fresh(workdir: Path) -> None:
    """Forget a previous demo's pipeline state (the generated data is kept)."""
    for name in ("airflow", "workspace", "mail", "staging", "bucket", "logs"):
        shutil.rmtree(workdir / name, ignore_errors=True)


@contextmanager
def _timed(console: Console, name: str, timings: dict[str, float]) -> Iterator[None]:
    start = time.perf_counter()
    with console.status(f"{name} ..."):
        yield
    timings[name] = time.perf_counter() - start
    console.print(f"[green]✓[/green] {name} [dim]({timings[name]:.0f} s)[/dim]")


def _run_night(console: Console, env: dict[str, str], workdir: Path, night: int, logical_date: date) -> NightRun:
    start = time.perf_counter()
    log_path = workdir / "logs" / f"night-{night}.log"
    with console.status(f"night {night} ({logical_date}): starting airflow dags test ...") as status:
        def on_task(task_id: str, map_index: int) -> None:
            label = task_id if map_index < 0 else f"{task_id}[{map_index}]"
            elapsed = f"[dim]({time.perf_counter() - start:.0f} s)[/dim]"
            console.print(f"  night {night} · {label} {elapsed}")
            status.update(f"night {night} ({logical_date}): {label} {elapsed}")

        def on_epoch(line: str) -> None:
            console.print(f"    [dim]{escape(line)}[/dim]")

        run_airflow(["dags", "test", DAG_ID, logical_date.isoformat()], env, log_path, on_task, on_epoch)
    tasks, results = read_night(workdir / "airflow" / "airflow.db", logical_date)
    wall = time.perf_counter() - start
    console.print(f"[green]✓[/green] night {night} ({logical_date}) [dim]({wall:.0f} s, log {log_path})[/dim]")
    return NightRun(night, logical_date, wall, tasks, results)


# -- the printout ---------------------------------------------------------------------------------------------------


def counts_table(result: DemoResult) -> Table:
    table = Table(title="Work per night (night 2 only pays for what is new)")
    table.add_column("")
    for run in result.nights:
        table.add_column(f"night {run.night}", justify="right")
    for key in result.counts(1):
        table.add_row(key, *(str(result.counts(run.night)[key]) for run in result.nights))
    return table


def task_table(result: DemoResult) -> Table:
    table = Table(title="Wall time per task (s)")
    table.add_column("task")
    for run in result.nights:
        table.add_column(f"night {run.night}", justify="right")
    per_night = [run.tasks.groupby("task_id", sort=False)["duration_s"].sum(min_count=1) for run in result.nights]
    order = list(dict.fromkeys(t for frame in per_night for t in frame.index))
    for task_id in order:
        cells = [("–" if pd.isna(frame.get(task_id)) else f"{frame.get(task_id):.1f}") for frame in per_night]
        table.add_row(task_id, *cells)
    table.add_row("[bold]night total (wall)[/bold]", *(f"{run.wall_s:.0f}" for run in result.nights))
    return table


def print_summary(result: DemoResult, console: Console | None = None) -> None:
    console = console or make_console()
    console.print(task_table(result))
    console.print(counts_table(result))
    for run in result.nights:
        promoted = run.results.get("promote") or {}
        report = run.results.get("report") or {}
        verdict = "promoted" if promoted.get("promoted") else "not promoted"
        console.print(f"night {run.night}: version {report.get('version', '–')} {verdict}; report {report.get('uri', '–')}")
    console.print("\n[bold]Reports[/bold]")
    for path in result.reports:
        console.print(f"  {path}")
    for path in result.emails:
        console.print(f"  email received: {path}")
    console.print("\n[bold]Registry[/bold]")
    console.print(f"  production: {result.production_version or '(none)'}")
    for record in result.registry_history:
        console.print(f"  #{record['seq']} {record['action']} {record['version']} (from {record['previous_version']})")
    console.print(f"  promoted ONNX model: {result.onnx_uri or '(none)'}")
    console.print(f"  local copy: {result.onnx_local or '(none)'}")
    console.print(f"  the bucket's models/ folder (the local S3 server has stopped): {result.workdir / 'bucket'}")
    console.print(f"\ndemo wall time: {result.wall_s / 60:.1f} min (work folder {result.workdir})")
