"""`mavias data make synthetic-scenes|shape-colours|shape-textures|two-moons-3d`: write a built-in benchmark into a folder.

Options left out keep the config's defaults (see :class:`SyntheticScenesConfig`, :class:`TwoMoons3DConfig`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, ValidationError

from mavias.benchmarks import BENCHMARKS

app = typer.Typer(help="Built-in offline benchmarks.", no_args_is_help=True)
make_app = typer.Typer(help="Generate a benchmark into a folder.", no_args_is_help=True)
app.add_typer(make_app, name="make")

OutOption = Annotated[Path, typer.Option("--out", help="output folder")]
SeedOption = Annotated[int | None, typer.Option(help="random seed")]


def _make(name: str, out: Path, options: dict) -> None:
    benchmark = BENCHMARKS[name]
    try:
        cfg: BaseModel = benchmark.config(**{key: value for key, value in options.items() if value is not None})
    except ValidationError as err:
        raise typer.BadParameter(str(err)) from None
    path = benchmark.make(out, cfg)
    typer.echo(f"{name}: wrote {path}")


@make_app.command("synthetic-scenes")
def synthetic_scenes(
    out: OutOption,
    seed: SeedOption = None,
    n_train: Annotated[int | None, typer.Option()] = None,
    n_val: Annotated[int | None, typer.Option()] = None,
    n_test_per_cell: Annotated[int | None, typer.Option(help="test images per (class, background, co-object)")] = None,
    image_size: Annotated[int | None, typer.Option()] = None,
    classes: Annotated[str | None, typer.Option(help="comma-separated, e.g. car,bird,boat")] = None,
    bg_align: Annotated[float | None, typer.Option()] = None,
    coobj_align: Annotated[float | None, typer.Option()] = None,
    tag_miss_rate: Annotated[float | None, typer.Option()] = None,
    spurious_tags_per_image: Annotated[float | None, typer.Option()] = None,
) -> None:
    """Images of objects on backgrounds with co-objects, tags, ground-truth relevance (UrbanCars-like)."""
    options = locals() | {"classes": tuple(c.strip() for c in classes.split(",")) if classes else None}
    _make("synthetic-scenes", options.pop("out"), options)


def _add_shapes_command(name: str, summary: str) -> None:
    def command(
        out: OutOption,
        seed: SeedOption = None,
        n_train: Annotated[int | None, typer.Option()] = None,
        n_val: Annotated[int | None, typer.Option()] = None,
        n_test_per_cell: Annotated[int | None, typer.Option(help="test images per (class, attribute value)")] = None,
        image_size: Annotated[int | None, typer.Option()] = None,
        bias_align: Annotated[float | None, typer.Option(help="P(shortcut aligned) in shortcut classes")] = None,
    ) -> None:
        _make(name, out, {"seed": seed, "n_train": n_train, "n_val": n_val, "n_test_per_cell": n_test_per_cell,
                          "image_size": image_size, "bias_align": bias_align})

    command.__doc__ = summary
    make_app.command(name)(command)


_add_shapes_command("shape-colours", "10 shape classes; the shape's colour is a 95% shortcut in half of them.")
_add_shapes_command("shape-textures", "12 shape classes; the background texture is a 95% shortcut in a third of them.")


@make_app.command("two-moons-3d")
def two_moons_3d(
    out: OutOption,
    seed: SeedOption = None,
    n_train: Annotated[int | None, typer.Option()] = None,
    n_val: Annotated[int | None, typer.Option()] = None,
    n_test: Annotated[int | None, typer.Option()] = None,
    moon_noise: Annotated[float | None, typer.Option()] = None,
    x3_noise: Annotated[float | None, typer.Option(help="std of x3 around +-1")] = None,
    x3_align: Annotated[float | None, typer.Option(help="train/val share whose x3 sign agrees with the class")] = None,
) -> None:
    """The supplement's 3-D two moons: x3 is a linear shortcut in train/val, independent of the label in test."""
    options = dict(locals())
    _make("two-moons-3d", options.pop("out"), options)
