"""The `mavias` command line: one sub-command group per pipeline stage."""

from __future__ import annotations

import typer

from mavias.bench.cli import app as bench_app
from mavias.benchmarks.cli import app as data_app
from mavias.demo import demo_command
from mavias.discover.cli import app as discover_app
from mavias.encode.cli import app as encode_app
from mavias.judging.cli import app as judge_app
from mavias.pipeline.cli_export import export_command
from mavias.pipeline.cli_registry import app as registry_app
from mavias.serve.launch import serve_command
from mavias.tagging.cli import app as tag_app
from mavias.train.cli import evaluate, train

app = typer.Typer(
    help="MAVias: find and remove visual biases from image classifiers.", no_args_is_help=True, pretty_exceptions_show_locals=False
)
app.add_typer(data_app, name="data")
app.add_typer(tag_app, name="tag")
app.add_typer(judge_app, name="judge")
app.add_typer(encode_app, name="encode")
app.add_typer(discover_app, name="discover")
app.add_typer(registry_app, name="registry")
app.add_typer(bench_app, name="bench")
app.command()(train)
app.command()(evaluate)
app.command("demo")(demo_command)
app.command("export")(export_command)
app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False)(serve_command)

if __name__ == "__main__":
    app()
