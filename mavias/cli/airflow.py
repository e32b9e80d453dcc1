"""``mavias airflow up|down``: run the nightly DAG under a real local Airflow stack (see
:mod:`mavias.ops.airflow_stack.stack`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mavias.ops.airflow_stack import stack as local_airflow

app = typer.Typer(help="A local Airflow stack: LocalExecutor on SQLite, or CeleryExecutor with PostgreSQL, Redis and "
                       "two workers (default and gpu queues).")

HomeOption = Annotated[Path, typer.Option("--home", help="AIRFLOW_HOME of the stack: metadata DB, logs, pids.")]


@app.command()
def up(
    home: HomeOption = Path("airflow-home"),
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="MAVIAS_NIGHTLY_CONFIG", exists=True,
                                                dir_okay=False, help="Nightly config YAML.")] = None,
    port: Annotated[int, typer.Option(help="Port of the API server and UI on 127.0.0.1.", min=1, max=65535)] = 8080,
    smtp_host: Annotated[str | None, typer.Option(help="SMTP server for the report email (no TLS).")] = None,
    smtp_port: Annotated[int, typer.Option(help="Its port.", min=1, max=65535)] = 25,
    executor: Annotated[local_airflow.Executor, typer.Option(
        help="local: LocalExecutor on SQLite; celery: CeleryExecutor, PostgreSQL, Redis, a default and a gpu worker."
    )] = "local",
    db_port: Annotated[int | None, typer.Option(help="celery: port of its PostgreSQL (default: a free one).", min=1,
                                                    max=65535)] = None,
    broker_port: Annotated[int | None, typer.Option(help="celery: port of its Redis (default: a free one).", min=1,
                                                        max=65535)] = None,
    database_url: Annotated[str | None, typer.Option(
        envvar="MAVIAS_AIRFLOW_DATABASE_URL", help="celery: a running PostgreSQL (postgresql://user:pw@host:port/db) "
        "instead of starting one.")] = None,
    broker_url: Annotated[str | None, typer.Option(
        envvar="MAVIAS_AIRFLOW_BROKER_URL", help="celery: a running Redis (redis://:pw@host:port/0) instead of "
        "starting one.")] = None,
) -> None:
    """Start the stack in the background with the gpu pool and the connections of the nightly config; S3
    credentials come from the environment (MAVIAS_S3_ACCESS_KEY_ID, MAVIAS_S3_SECRET_ACCESS_KEY or the AWS chain),
    never from the config file."""
    stack = local_airflow.up(home, config, port=port, smtp=(smtp_host, smtp_port) if smtp_host else None,
                             executor=executor, db_port=db_port, broker_port=broker_port, database_url=database_url,
                             broker_url=broker_url)
    typer.echo(f"started: {', '.join(stack.started)}" if stack.started else f"already running: {', '.join(stack.pids)}")
    typer.echo(f"Airflow UI: {stack.url}  (AIRFLOW_HOME {stack.home}; logs in {stack.home / 'logs'})")
    typer.echo(f"Trigger a night: source {stack.home / local_airflow.ENV_NAME} && airflow dags trigger mavias_nightly")
    typer.echo(f"Stop it: mavias airflow down --home {stack.home}")


@app.command()
def down(home: HomeOption = Path("airflow-home")) -> None:
    """Stop the stack started by `mavias airflow up` in HOME, and what it started."""
    stopped = local_airflow.down(home)
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else f"no stack runs in {home}")
