"""The built-in image benchmarks as the benches run them: the generators' settings, the true groups, the true shortcut
tags (used only to score), and which benchmarks are held out: no default, recipe or setting of the product was chosen
looking at their results.

Every training here uses the CLI defaults (:class:`mavias.core.train.config.TrainConfig` and its recipe); a bench changes
only the method, the seed and, where it tunes, what ``mavias tune`` chose. The images are drawn at the size they are
trained at (the recipe takes the size from the data).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from mavias.core.discovery import Workspace
from mavias.core.encode import MINILM, make_encoder
from mavias.core.relevance import load_relevance
from mavias.core.synthetic import BENCHMARKS, Sources, make_benchmark
from mavias.core.synthetic.digits import DigitsConfig, make_digits
from mavias.core.synthetic.shapes import ShapesConfig, ShapeTexturesConfig, make_shapes
from mavias.core.synthetic.sources import TRUTH_DIR, apply_sources
from mavias.core.synthetic.synthetic_scenes import (
    BACKGROUND_TAGS,
    COOBJECT_TAGS,
    MANIFEST_NAME,
    RELEVANCE_NAME,
    SyntheticScenesConfig,
    ThreeCueScenesConfig,
    make_synthetic_scenes,
)
from mavias.core.train.config import TrainConfig
from mavias.core.train.prepare import PreparedData, prepare_image_data
from mavias.errors import UserError


@dataclass(frozen=True)
class ImageBenchmark:
    name: str
    config: BaseModel  # the generator's settings
    make: Callable[[Path, BaseModel], Path]  # make(data_dir, config) -> manifest path
    true_shortcuts: Callable[[Path], dict[str, set[str]]]  # class -> its true shortcut tags (data_dir)
    held_out: bool = False
    share: float = 1.0  # of the generator's training and validation images

    @property
    def slug(self) -> str:
        """Its folder in a bench's work folder: the name, and the share of images when not whole."""
        return self.name if self.share == 1 else f"{self.name}-share{self.share:g}"

    @property
    def attrs(self) -> list[str]:
        """attr_* columns that, with the label, form the true groups (the benchmark's own, as in its dataset.json)."""
        return list(BENCHMARKS[self.name].group_attrs)


def _scene_shortcuts(data_dir: Path) -> dict[str, set[str]]:
    """Each class's background and co-object words, and its colour where colour is a shortcut."""
    scene = json.loads((data_dir / "benchmark.json").read_text())["scene"]
    return {c: {*BACKGROUND_TAGS[aligned["background"]], *COOBJECT_TAGS[aligned["coobject"]],
                *([aligned["color"]] if "color" in aligned else [])} for c, aligned in scene.items()}


def _listed_shortcuts(data_dir: Path) -> dict[str, set[str]]:
    return {c: {tag} for c, tag in json.loads((data_dir / "benchmark.json").read_text())["shortcut_tags"].items()}


SUITE: list[ImageBenchmark] = [
    ImageBenchmark("synthetic-scenes", SyntheticScenesConfig(image_size=32), make_synthetic_scenes, _scene_shortcuts),
    ImageBenchmark("shape-colours", ShapesConfig(image_size=24), make_shapes, _listed_shortcuts),
    # seen since its test figures confirmed MAVias's longer training (BENCHMARKS.md, "MAVias and training length")
    ImageBenchmark("shape-textures", ShapeTexturesConfig(image_size=24), make_shapes, _listed_shortcuts),
    # seen since MAVias's bias path was diagnosed and chosen on it (BENCHMARKS.md, "Why MAVias trailed JTT")
    ImageBenchmark("digit-backgrounds", DigitsConfig(), make_digits, _listed_shortcuts),
    # added, with its generator, before any run on it; reported first and apart, never used to choose
    ImageBenchmark("three-cue-scenes", ThreeCueScenesConfig(image_size=32), make_synthetic_scenes, _scene_shortcuts,
                   held_out=True),
]


def choose(names: list[str] | None, share: float = 1.0) -> list[ImageBenchmark]:
    """The suite's benchmarks by name (all when ``names`` is empty), each with ``share`` of its training and
    validation images; an unknown name is a one-line error."""
    known = [b.name for b in SUITE]
    if unknown := sorted(set(names or []) - set(known)):
        raise UserError(f"unknown benchmark {', '.join(map(repr, unknown))}; use --benchmark {' or '.join(known)}")
    return [at_share(b, share) for b in SUITE if not names or b.name in names]


def at_share(bench: ImageBenchmark, share: float) -> ImageBenchmark:
    """``bench`` with ``share`` of its training and validation images, a smaller and faster comparison; the test split
    stays whole, so its figures keep their resolution, and the tagger's images are the same."""
    if not 0 < share <= 1:
        raise UserError(f"a share of {share:g} of the images is not one; give a share in (0, 1], e.g. --share 0.5")
    if share == 1:
        return bench
    cfg = bench.config
    smaller = {split: max(1, round(getattr(cfg, split) * share)) for split in ("n_train", "n_val")}
    return replace(bench, config=cfg.model_copy(update=smaller), share=share)


def data_dir(work: Path, bench: ImageBenchmark) -> Path:
    settings = hashlib.sha256(bench.config.model_dump_json().encode()).hexdigest()[:8]
    return work / "data" / f"{bench.name}-{settings}"  # a changed generator never reuses stale images


def sources_dir(work: Path, bench: ImageBenchmark, sources: Sources) -> Path:
    """The folder of the benchmark's manifest and relevance table under ``sources`` (its images are shared)."""
    return data_dir(work, bench) / "sources" / sources.slug


def prepare(work: Path, bench: ImageBenchmark, sources: Sources = Sources(),
            encoder: str = MINILM) -> tuple[PreparedData, Path]:
    """Generate the benchmark's images once, then its tags and relevance from ``sources`` (by default the benchmark's
    tagger and the offline judge), then its splits with bias embeddings and true groups (images at the size drawn).
    Returns the data and the folder of its manifest, relevance table and ``benchmark.json``."""
    base, folder = data_dir(work, bench), sources_dir(work, bench, sources)
    if not (base / TRUTH_DIR / MANIFEST_NAME).exists():
        make_benchmark(bench.name, base, bench.config, Sources(tags="oracle", relevance="oracle"))
    if not (folder / MANIFEST_NAME).exists():
        apply_sources(base, folder, name=bench.name, cfg=bench.config, samples=BENCHMARKS[bench.name].tagging,
                      sources=sources)
    text_encoder = make_encoder(encoder)
    data = prepare_image_data(folder / MANIFEST_NAME, relevance=load_relevance(folder / RELEVANCE_NAME),
                              encoder=text_encoder, store_dir=Workspace(work).embeddings(text_encoder.encoder_id),
                              config=TrainConfig(encoder=encoder), group_attrs=bench.attrs, progress=False)
    return data, folder


def sources_measured(folder: Path) -> dict:
    """What a prepared benchmark's tags and relevance came from, and their measured quality (``benchmark.json``)."""
    return json.loads((folder / "benchmark.json").read_text())["discovery"]


def default_config(method: str, seed: int, **settings) -> TrainConfig:
    """The CLI defaults for ``method`` and ``seed`` (a bench's only changes besides what tuning chose)."""
    return TrainConfig.model_validate({**settings, "method": method, "seed": seed})


def mean_and_sd(rows: pd.DataFrame, by: list[str]) -> list[dict]:
    """Per group of ``by`` (in order of appearance): its number of seeds, and the mean and population sd over seeds of
    every other column but ``seed`` (a run without the figure left out of its mean)."""
    summary = []
    for keys, part in rows.groupby(by, sort=False):
        row: dict = {**dict(zip(by, keys if isinstance(keys, tuple) else (keys,))), "seeds": len(part)}
        for column in part.columns.drop([*by, "seed"]):
            values = part[column].dropna()
            if len(values):
                row[column] = {"mean": float(values.mean()), "std": float(values.std(ddof=0))}
        summary.append(row)
    return summary
