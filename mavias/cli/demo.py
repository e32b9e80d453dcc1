"""`mavias demo`: two nights of the nightly DAG on this machine, offline (:mod:`mavias.tools.demo`), then one real
request to the model server on the promoted model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mavias.ops.serve.try_it import show_round_trip
from mavias.tools.demo.run import MODEL_NAME, print_summary, run_demo
from mavias.utils.console import make_console


def demo_command(
    workdir: Annotated[Path, typer.Option(
        "--workdir", help="work folder (data, S3 and SMTP logs, Airflow home): new, empty, or one the demo made",
    )] = Path("runs/demo"),
    n_train: Annotated[int, typer.Option(help="synthetic-scenes training images, split over the two nights",
                                         min=2)] = 4000,
    n_val: Annotated[int, typer.Option(help="validation images, split over the two nights", min=2)] = 1200,
    n_test_per_cell: Annotated[int, typer.Option(help="evaluation images per (class, background, co-object)",
                                                 min=1)] = 20,
    epochs: Annotated[int | None, typer.Option(help="training epochs of both models, each night; default: the "
                                                    "training recipe's, as a user gets them", min=1)] = None,
) -> None:
    """Two nights of the nightly DAG on this machine, offline: local S3 and SMTP servers, `airflow dags test`."""
    console = make_console()
    result = run_demo(workdir, n_train=n_train, n_val=n_val, n_test_per_cell=n_test_per_cell, epochs=epochs,
                      console=console)
    print_summary(result, console)
    version_dir = result.onnx_local.parent if result.onnx_local else None
    image = next(iter(sorted((workdir / "data" / "images" / "test").glob("*.png"))), None)
    show_round_trip(version_dir, MODEL_NAME, image, workdir / "logs" / "serve.log", console)
