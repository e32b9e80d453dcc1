"""`mavias data`: ``make synthetic-scenes|three-cue-scenes|shape-colours|shape-textures|digit-backgrounds|two-moons-3d``
writes a built-in benchmark into a folder (options left out keep the config's defaults, e.g. :class:`SyntheticScenesConfig`);
``import imagefolder|s3|waterbirds|celeba|urbancars|imagenet9`` writes OUT/manifest.parquet, dataset.json and
quarantine.csv (the data folder itself is only read).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, ValidationError

from mavias.cli.options import (
    LeakOption,
    RelevanceOption,
    TaggerCheckpointOption,
    TaggerQualityOption,
    TagsOption,
    command_line,
    discovery_sources,
    writable,
)
from mavias.core.datasets.base import ImportResult, check_out_dir, write_import
from mavias.core.datasets.celeba import import_celeba
from mavias.core.datasets.imagefolder import SplitOptions, import_imagefolder
from mavias.core.datasets.imagenet9 import import_imagenet9
from mavias.core.datasets.s3 import import_s3, settings_for
from mavias.core.datasets.sidecar import attach_tags
from mavias.core.datasets.urbancars import import_urbancars
from mavias.core.datasets.waterbirds import import_waterbirds
from mavias.core.manifest import small_class_warnings
from mavias.core.manifest.info import DatasetInfo, write_dataset_info
from mavias.errors import UserError
from mavias.utils.console import make_console

app = typer.Typer(help="Built-in benchmarks (make) and importers of image folders and published datasets (import).",
                  no_args_is_help=True)
make_app = typer.Typer(help="Generate a benchmark into a folder.", no_args_is_help=True)
import_app = typer.Typer(help="Import a dataset from its folder layout into a manifest.", no_args_is_help=True)
app.add_typer(make_app, name="make")
app.add_typer(import_app, name="import")

OutOption = Annotated[Path, typer.Option("--out", help="output folder", callback=writable)]
SeedOption = Annotated[int | None, typer.Option(help="random seed")]


def _make(name: str, out: Path, options: dict) -> None:
    from mavias.core.synthetic import BENCHMARKS, make_benchmark

    given = {key: options.pop(key, None) for key in ("tags", "relevance", "leak", "tagger_quality", "tagger_checkpoint")}
    benchmark = BENCHMARKS[name]
    try:
        cfg: BaseModel = benchmark.config(**{key: value for key, value in options.items() if value is not None})
    except ValidationError as err:
        problems = "; ".join(f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']} (got {e['input']!r})"
                             for e in err.errors(include_url=False))
        raise UserError(f"invalid {name} settings: {problems}") from None
    chosen = None if benchmark.tagging is None and not any(given.values()) else discovery_sources(**given)
    path = make_benchmark(name, out, cfg, chosen)
    if benchmark.group_attrs:  # `mavias evaluate` reports the closed-set groups beside the label-free ones
        write_dataset_info(DatasetInfo(name=name, group_attrs=list(benchmark.group_attrs), source="generated"), path)
    typer.echo(f"{name}: wrote {path}")
    if benchmark.tagging is not None:
        _print_sources(out)


def _print_sources(out: Path) -> None:
    import json

    discovery = json.loads((out / "benchmark.json").read_text())["discovery"]
    tags, relevance = discovery["tags"], discovery["relevance"]
    if tags["source"] == "tagger":
        typer.echo(f"tags: the benchmark's tagger ({tags['quality']}), mean per-tag F1 {tags['mean_f1']:.2f} on "
                   f"held-out images (per tag: {out / 'tagger' / tags['quality'] / 'quality.csv'})")
    else:
        typer.echo("tags: the generator's own attributes (oracle)")
    typer.echo(f"relevance: {relevance['source']}, precision {relevance['precision']:.2f} / recall "
               f"{relevance['recall']:.2f} against the ground truth ({out / 'truth' / 'relevance.parquet'})"
               + (f", {relevance['leak']} defining tag(s) per class leaked" if relevance["leak"] else ""))


def _add_scene_command(name: str, summary: str, color_shortcut: bool) -> None:
    def command(
        out: OutOption,
        seed: SeedOption = None,
        n_train: Annotated[int | None, typer.Option()] = None,
        n_val: Annotated[int | None, typer.Option()] = None,
        n_test_per_cell: Annotated[int | None, typer.Option(help="test images per combination of class and "
                                                                 "shortcut values")] = None,
        image_size: Annotated[int | None, typer.Option()] = None,
        classes: Annotated[str | None, typer.Option(help="comma-separated, e.g. car,bird,boat")] = None,
        bg_align: Annotated[float | None, typer.Option()] = None,
        coobj_align: Annotated[float | None, typer.Option()] = None,
        color_align: Annotated[float | None, typer.Option(help="three-cue-scenes: P(object colour aligned with the "
                                                               "class)")] = None,
        tag_miss_rate: Annotated[float | None, typer.Option(help="oracle tags: P(a true tag is not emitted)")] = None,
        spurious_tags_per_image: Annotated[float | None, typer.Option(help="oracle tags: wrong tags per image")] = None,
        tags: TagsOption = None,
        relevance: RelevanceOption = None,
        leak: LeakOption = 0,
        tagger_quality: TaggerQualityOption = "default",
        tagger_checkpoint: TaggerCheckpointOption = None,
    ) -> None:
        if color_align is not None and not color_shortcut:
            raise typer.BadParameter(f"{name} draws colours independently of the class; --color-align is an "
                                     "option of three-cue-scenes")
        _make(name, out, {"seed": seed, "n_train": n_train, "n_val": n_val, "n_test_per_cell": n_test_per_cell,
                          "image_size": image_size, "bg_align": bg_align, "coobj_align": coobj_align,
                          "color_align": color_align, "tag_miss_rate": tag_miss_rate,
                          "spurious_tags_per_image": spurious_tags_per_image,
                          "classes": tuple(c.strip() for c in classes.split(",")) if classes else None,
                          "tags": tags, "relevance": relevance, "leak": leak, "tagger_quality": tagger_quality,
                          "tagger_checkpoint": tagger_checkpoint})

    command.__doc__ = summary
    make_app.command(name)(command)


_add_scene_command("synthetic-scenes", "Objects on backgrounds with co-objects, tags, ground-truth relevance "
                   "(UrbanCars-like: two shortcuts per class).", color_shortcut=False)
_add_scene_command("three-cue-scenes", "Like synthetic-scenes with three shortcuts per class at once: background, "
                   "co-object and the object's colour (airplane, fish, house by default).", color_shortcut=True)


def _add_single_shortcut_command(name: str, summary: str) -> None:
    def command(
        out: OutOption,
        seed: SeedOption = None,
        n_train: Annotated[int | None, typer.Option()] = None,
        n_val: Annotated[int | None, typer.Option()] = None,
        n_test_per_cell: Annotated[int | None, typer.Option(help="test images per (class, attribute value)")] = None,
        image_size: Annotated[int | None, typer.Option()] = None,
        bias_align: Annotated[float | None, typer.Option(help="P(shortcut aligned) in the shortcut classes")] = None,
        tags: TagsOption = None,
        relevance: RelevanceOption = None,
        leak: LeakOption = 0,
        tagger_quality: TaggerQualityOption = "default",
        tagger_checkpoint: TaggerCheckpointOption = None,
    ) -> None:
        _make(name, out, {"seed": seed, "n_train": n_train, "n_val": n_val, "n_test_per_cell": n_test_per_cell,
                          "image_size": image_size, "bias_align": bias_align, "tags": tags, "relevance": relevance,
                          "leak": leak, "tagger_quality": tagger_quality, "tagger_checkpoint": tagger_checkpoint})

    command.__doc__ = summary
    make_app.command(name)(command)


_add_single_shortcut_command("shape-colours", "10 shape classes; the shape's colour is a 95% shortcut in half of them.")
_add_single_shortcut_command("shape-textures", "12 shape classes; the background texture is a 95% shortcut in a third of them.")
_add_single_shortcut_command("digit-backgrounds", "10 printed digits; the background colour is a 95% shortcut in every class.")


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


# -- mavias data import ------------------------------------------------------------------------------------------------

Root = Annotated[Path, typer.Argument(help="the dataset's root folder (only read, never written)", exists=True,
                                       file_okay=False)]
Out = Annotated[Path, typer.Option("--out", help="output folder for manifest.parquet, dataset.json, quarantine.csv",
                                   callback=writable)]
SplitFrom = Annotated[bool, typer.Option("--split-from", help="take splits from train/ val/ test/ sub-folders")]
Seed = Annotated[int, typer.Option("--seed", help="seed of the stratified split / subsampling")]
Val = Annotated[float | None, typer.Option("--val", help="validation fraction of the stratified split [default: 0.1]")]
Test = Annotated[float | None, typer.Option("--test", help="test fraction of the stratified split [default: 0.1]")]
Tags = Annotated[Path | None, typer.Option("--tags", help="tags sidecar: CSV image,tags ('a;b', image relative to the "
                                                          "folder) or Parquet with a list column tags")]


def _run(out: Path, root: Path | None, make: Callable[[], ImportResult], tags: Path | None = None,
         base: str | None = None) -> None:
    check_out_dir(out, root)
    result = make()
    warnings = []
    if tags is not None:
        result, warnings = attach_tags(result, tags, base or str(root.resolve()))
    path = write_import(result, out)
    console = make_console()
    for warning in warnings + small_class_warnings(result.manifest):
        console.print(f"[bold red]warning:[/] {warning}", soft_wrap=True)
    console.print(f"{result.info.name}: {result.summary()}\nwrote {path} (quarantine: {out / 'quarantine.csv'})",
                  soft_wrap=True)
    discover = command_line("mavias", "discover", "--partition", out, "--workspace", out.parent / "workspace")
    audit = command_line("mavias", "audit", path, "--out", out.parent / "audit")
    console.print(f"next: {discover}  (or every step at once: {audit})", soft_wrap=True)


def _split_options(split_from: bool, seed: int, val: float | None, test: float | None) -> SplitOptions:
    if split_from and (val is not None or test is not None):
        raise UserError("--val and --test size a stratified split, and --split-from takes the splits from the "
                        "train/ val/ test/ folders", hint="drop --split-from, or --val and --test")
    return SplitOptions(split_from, seed, 0.1 if val is None else val, 0.1 if test is None else test)


@import_app.command("imagefolder")
def imagefolder(root: Root, out: Out, split_from: SplitFrom = False, seed: Seed = 0, val: Val = None,
                test: Test = None, tags: Tags = None) -> None:
    """ROOT/<class>/<image> (or ROOT/{train,val,test}/<class>/<image> with --split-from)."""
    options = _split_options(split_from, seed, val, test)
    _run(out, root, lambda: import_imagefolder(root, options), tags)


@import_app.command("s3")
def s3(
    uri: Annotated[str, typer.Argument(help="s3://bucket/prefix/ holding the ImageFolder layout")],
    out: Out,
    split_from: SplitFrom = False,
    seed: Seed = 0,
    val: Val = None,
    test: Test = None,
    endpoint_url: Annotated[str | None, typer.Option("--endpoint-url", help="S3-compatible endpoint (MinIO…)")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML with an s3: section (else MAVIAS_S3_*)")] = None,
    tags: Tags = None,
) -> None:
    """The ImageFolder layout under an S3 prefix; uris stay s3:// URIs."""
    from botocore.exceptions import BotoCoreError, ClientError

    from mavias.storage.mistakes import storage_user_error

    options = _split_options(split_from, seed, val, test)
    settings = settings_for(uri, config=None if config is None else str(config), endpoint_url=endpoint_url)
    try:
        _run(out, None, lambda: import_s3(uri, settings, options), tags, uri)
    except (BotoCoreError, ClientError) as err:
        if isinstance(err, ClientError) and err.response.get("Error", {}).get("Code") == "NoSuchBucket":
            raise UserError(f"the bucket of {uri} does not exist", hint="check the URI, or --endpoint-url") from None
        raise storage_user_error(err) or err from None


@import_app.command("waterbirds")
def waterbirds(root: Root, out: Out, tags: Tags = None) -> None:
    """waterbird_complete95_forest2water2/ with metadata.csv (attr_place)."""
    _run(out, root, lambda: import_waterbirds(root), tags)


@import_app.command("celeba")
def celeba(
    root: Root,
    out: Out,
    biased: Annotated[bool, typer.Option("--biased", help="Biased-CelebA: subsample training bias-conflicting images")] = False,
    bias_ratio: Annotated[float | None, typer.Option("--bias-ratio", min=0.5, max=0.999,
                                                     help="aligned fraction per class with --biased [default: 0.9]")
                          ] = None,
    seed: Seed = 0,
    tags: Tags = None,
) -> None:
    """CelebA (BlondHair target, attr_male) from the txt or csv attribute/partition files."""
    if bias_ratio is not None and not biased:
        raise UserError("--bias-ratio sets how biased --biased makes the training split", hint="add --biased, or drop "
                        "--bias-ratio for the full CelebA")
    ratio = 0.9 if bias_ratio is None else bias_ratio
    _run(out, root, lambda: import_celeba(root, biased=biased, bias_ratio=ratio, seed=seed), tags)


@import_app.command("urbancars")
def urbancars(root: Root, out: Out, tags: Tags = None) -> None:
    """UrbanCars bg-…_co_occur_obj-…/<split>/obj-…_bg-…_co_occur_obj-…/ folders."""
    _run(out, root, lambda: import_urbancars(root), tags)


@import_app.command("imagenet9")
def imagenet9(
    root: Root,
    out: Out,
    train: Annotated[Path | None, typer.Option("--train", help="IN-9L ImageFolder with train/ and val/ sub-folders")] = None,
) -> None:
    """ImageNet-9 backgrounds challenge: every bg_challenge/<variant>/val/ becomes a named evaluation split."""
    _run(out, root, lambda: import_imagenet9(root, train_root=train))
