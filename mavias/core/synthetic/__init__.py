"""Built-in offline benchmarks: ``synthetic-scenes``, ``three-cue-scenes``, ``shape-colours``, ``shape-textures``,
``digit-backgrounds`` (images, tags, ground-truth relevance) and ``two-moons-3d``.

:func:`make_benchmark` draws one as a user meets it: tags from the benchmark's image tagger and relevance from the
judge by default, the generator's attributes and the ground truth kept apart for scoring (:mod:`.sources`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pandas as pd
from pydantic import BaseModel

from mavias.core.synthetic import digits, shapes, synthetic_scenes
from mavias.core.synthetic.digits import DigitsConfig, make_digits
from mavias.core.synthetic.shapes import ShapesConfig, ShapeTexturesConfig, make_shapes
from mavias.core.synthetic.sources import Sources, apply_sources, keep_truth
from mavias.core.synthetic.synthetic_scenes import (
    SyntheticScenesConfig,
    ThreeCueScenesConfig,
    benchmark_vocabulary,
    ground_truth_relevance,
    make_synthetic_scenes,
)
from mavias.core.synthetic.tagger import TaggingSamples
from mavias.core.synthetic.two_moons import TwoMoons3DConfig, make_two_moons_3d
from mavias.errors import UserError


class Benchmark(NamedTuple):
    config: type[BaseModel]
    make: Callable[..., Path]  # make(out_dir, cfg) -> path of the main artifact
    group_attrs: tuple[str, ...] = ()  # attr_* columns of its manifest that, with the label, form the true groups
    tagging: TaggingSamples | None = None  # images for its tagger, attributes independent of the class; None: no images
    truth: Callable[[BaseModel], pd.DataFrame] | None = None  # ground-truth relevance of every (class, word) pair


def _scenes_truth(cfg: SyntheticScenesConfig) -> pd.DataFrame:
    return ground_truth_relevance(cfg.classes)


BIAS_ALIGNED = ("attr_bias_aligned",)
BENCHMARKS: dict[str, Benchmark] = {
    "synthetic-scenes": Benchmark(SyntheticScenesConfig, make_synthetic_scenes,
                                  ("attr_bg_aligned", "attr_coobj_aligned"), synthetic_scenes.tagging_samples,
                                  _scenes_truth),
    "three-cue-scenes": Benchmark(ThreeCueScenesConfig, make_synthetic_scenes,
                                  ("attr_bg_aligned", "attr_coobj_aligned", "attr_color_aligned"),
                                  synthetic_scenes.tagging_samples, _scenes_truth),
    "shape-colours": Benchmark(ShapesConfig, make_shapes, BIAS_ALIGNED, shapes.tagging_samples,
                               shapes.ground_truth_relevance),
    "shape-textures": Benchmark(ShapeTexturesConfig, make_shapes, BIAS_ALIGNED, shapes.tagging_samples,
                                shapes.ground_truth_relevance),
    "digit-backgrounds": Benchmark(DigitsConfig, make_digits, BIAS_ALIGNED, digits.tagging_samples,
                                   lambda _: digits.ground_truth_relevance()),
    "two-moons-3d": Benchmark(TwoMoons3DConfig, make_two_moons_3d),
}


def make_benchmark(name: str, out_dir: str | Path, cfg: BaseModel | None = None,
                   sources: Sources | None = None) -> Path:
    """Draw benchmark ``name`` into ``out_dir``; an image benchmark gets its tags and relevance from ``sources``
    (default: its tagger and the offline judge). Returns the path of its main artifact (the manifest)."""
    benchmark = BENCHMARKS[name]
    cfg = cfg or benchmark.config()
    out_dir = Path(out_dir)
    path = benchmark.make(out_dir, cfg)
    if benchmark.tagging is None:
        if sources is not None and sources != Sources(tags="oracle", relevance="oracle"):
            raise UserError(f"{name} has no images: its features and relevance are the generator's",
                            hint="leave out --tags, --relevance, --leak and the tagger options")
        return path
    keep_truth(out_dir)
    return apply_sources(out_dir, out_dir, name=name, cfg=cfg, samples=benchmark.tagging, sources=sources or Sources())


__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "Sources",
    "DigitsConfig",
    "ShapeTexturesConfig",
    "ShapesConfig",
    "SyntheticScenesConfig",
    "ThreeCueScenesConfig",
    "TwoMoons3DConfig",
    "benchmark_vocabulary",
    "ground_truth_relevance",
    "make_benchmark",
    "make_digits",
    "make_shapes",
    "make_synthetic_scenes",
    "make_two_moons_3d",
]
