"""The `mavias` command line: the root command here, one module per command group beside it. The top layer: it
imports the library, nothing imports it.

A user mistake anywhere below (any :class:`mavias.errors.UserError`, an invalid config, bad YAML, a missing file)
ends with one red line and exit status 2; ``mavias --debug ...`` shows the traceback instead.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from mavias.cli.airflow import app as airflow_app
from mavias.cli.bench import app as bench_app
from mavias.cli.data import app as data_app
from mavias.cli.demo import demo_command
from mavias.cli.discover import app as discover_app
from mavias.cli.encode import app as encode_app
from mavias.cli.export import export_command
from mavias.cli.judge import app as judge_app
from mavias.cli.registry import app as registry_app
from mavias.cli.tag import app as tag_app
from mavias.cli.train import evaluate, train
from mavias.cli.tune import tune_command
from mavias.errors import user_errors_exit
from mavias.serve.launch import serve_command

DEBUG_ENV = "MAVIAS_DEBUG"


class UserErrorGroup(TyperGroup):
    """The root command: every sub-command runs inside it, so user mistakes of any command are handled here."""

    def invoke(self, ctx: Any) -> Any:
        with user_errors_exit(debug=bool(ctx.params.get("debug"))):
            return super().invoke(ctx)


app = typer.Typer(
    cls=UserErrorGroup,
    help="MAVias: find and remove visual biases from image classifiers.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def main(
    debug: Annotated[bool, typer.Option("--debug", envvar=DEBUG_ENV, help="show tracebacks of errors")] = False,
) -> None:
    """MAVias: find and remove visual biases from image classifiers."""


app.add_typer(data_app, name="data")
app.add_typer(tag_app, name="tag")
app.add_typer(judge_app, name="judge")
app.add_typer(encode_app, name="encode")
app.add_typer(discover_app, name="discover")
app.add_typer(registry_app, name="registry")
app.add_typer(bench_app, name="bench")
app.add_typer(airflow_app, name="airflow")
app.command()(train)
app.command()(evaluate)
app.command("tune")(tune_command)
app.command("demo")(demo_command)
app.command("export")(export_command)
app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False)(serve_command)
