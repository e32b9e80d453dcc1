"""The `mavias` command line: the root command here, one module per command group beside it. The top layer: it
imports the library, nothing imports it.

The root imports no command module: each is imported when its command runs (torch, pandas and the rest load only
then), so ``mavias --help`` answers at once; :data:`COMMANDS` holds the one-line help the listing shows.

A user mistake anywhere below (any :class:`mavias.errors.UserError`, an invalid config, bad YAML, a missing file)
ends with one red line and exit status 2; ``mavias --debug ...`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Annotated, Any, NamedTuple

import click
import typer
from typer.core import TyperGroup

from mavias.cli.errors import user_errors_exit

if not sys.stdout.isatty() and not {"TERMINAL_WIDTH", "COLUMNS"} & set(os.environ):
    os.environ["TERMINAL_WIDTH"] = "160"  # piped help (| less, > file) keeps its option names and defaults whole

DEBUG_ENV = "MAVIAS_DEBUG"


class Command(NamedTuple):
    module: str
    attribute: str  # a typer.Typer (a command group) or a command function
    help: str  # what `mavias --help` lists; a test keeps it equal to the command's own


COMMANDS = {
    "audit": Command("mavias.cli.audit", "audit_command",
                     "Audit your own images in one command: import, tag, judge, ERM reference, MAVias, evaluate, "
                     "export and the HTML report, resumably."),
    "train": Command("mavias.cli.train", "train",
                     "Train one model (`--set method=`: mavias, erm, groupdro, jtt, lff, sd, flac or debian); writes "
                     "checkpoints, metrics.csv and TensorBoard logs."),
    "evaluate": Command("mavias.cli.train", "evaluate",
                        "Evaluate a run: the label-free (open-set) worst group under the reference's B', the closed-set "
                        "one beside it where group attributes exist (--group-attrs or dataset.json), UrbanCars-style "
                        "gaps, and the CelebA / ImageNet-9 metrics when the manifest's dataset.json declares that "
                        "protocol."),
    "tune": Command("mavias.cli.tune", "tune_command",
                    "Search the learning rate (two decades around the recipe's), the epochs and the method's own "
                    "settings (`--set method=...`, default mavias) with Optuna TPE and median pruning, selecting by "
                    "the bias-unaware validation criterion only."),
    "demo": Command("mavias.cli.demo", "demo_command",
                    "Two nights of the nightly DAG on this machine, offline: local S3 and SMTP servers, `airflow dags "
                    "test`."),
    "export": Command("mavias.cli.export", "export_command",
                      "Export the main model (backbone + head, never the bias projection) as ONNX, verified against "
                      "PyTorch."),
    "serve": Command("mavias.cli.serve", "serve_command",
                     "Serve an exported model (open inference protocol V1/V2 over REST and gRPC, on 127.0.0.1); see "
                     "--help."),
    "data": Command("mavias.cli.data", "app", "Built-in benchmarks (make) and importers of image folders and "
                                              "published datasets (import)."),
    "tag": Command("mavias.cli.tag", "app",
                   "`mavias tag`: tag the images of a manifest, one shard or all shards, resumably."),
    "judge": Command("mavias.cli.judge", "app",
                     "`mavias judge`: decide per class which tags are relevant (intrinsic) and which are potential "
                     "biases."),
    "encode": Command("mavias.cli.encode", "app",
                      "`mavias encode`: the irrelevant tags of each sample -> one bias embedding per distinct tag "
                      "set, stored once in the workspace's embedding store (which training reads; `mavias discover` "
                      "does this as its last step)."),
    "discover": Command("mavias.cli.discover", "app",
                        "`mavias discover --partition P`: tag -> judge -> encode one partition, paying only for what "
                        "is new."),
    "registry": Command("mavias.cli.registry", "app",
                        "Model registry: immutable versions, atomic production pointer, history, rollback."),
    "bench": Command("mavias.cli.bench", "app", "Benchmarks (speed and quality), recorded in BENCHMARKS.md."),
    "airflow": Command("mavias.cli.airflow", "app",
                       "A local Airflow stack: LocalExecutor on SQLite, or CeleryExecutor with PostgreSQL, Redis and "
                       "two workers (default and gpu queues)."),
}
COMMAND_SETTINGS = {  # the model server parses its own options
    "serve": {"context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
              "add_help_option": False},
}


def load_command(name: str) -> click.Command:
    """The real click command of ``name``: its module imported, converted as typer converts a registered command."""
    spec = COMMANDS[name]
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    holder = typer.Typer(add_completion=False)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name, **COMMAND_SETTINGS.get(name, {}))(target)
    return typer.main.get_group(holder).commands[name]


Resolved = tuple[str | None, click.Command | None, list[str]]


class LazyCommands(TyperGroup):
    """The root group: lists every command from :data:`COMMANDS` and loads one only when it runs. Every sub-command
    runs inside it, so user mistakes of any command are handled here."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *COMMANDS]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS:  # for the listing: its name and help, nothing imported
            return click.Command(name, help=COMMANDS[name].help)
        return super().get_command(ctx, name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Resolved:
        name, command, rest = super().resolve_command(ctx, args)
        return name, load_command(name) if name in COMMANDS else command, rest

    def invoke(self, ctx: Any) -> Any:
        with user_errors_exit(debug=bool(ctx.params.get("debug"))):
            return super().invoke(ctx)


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (tests swap it)."""

    @property
    def stream(self):  # noqa: ANN201 - logging's own attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def show_library_warnings() -> None:
    """The library's logged warnings as ``warning: ...`` lines on stderr (once: commands do not print them again)."""
    logger = logging.getLogger("mavias")
    if not any(isinstance(handler, _CurrentStderr) for handler in logger.handlers):
        handler = _CurrentStderr()
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("warning: %(message)s"))
        logger.addHandler(handler)


app = typer.Typer(
    cls=LazyCommands,
    help="MAVias: find and remove visual biases from image classifiers.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def main(
    debug: Annotated[bool, typer.Option("--debug", envvar=DEBUG_ENV, help="show tracebacks of errors")] = False,
) -> None:
    """MAVias: find and remove visual biases from image classifiers."""
    show_library_warnings()
