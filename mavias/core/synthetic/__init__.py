"""Built-in offline benchmarks: ``synthetic-scenes``, ``shape-colours``, ``shape-textures``, ``digit-backgrounds`` (images,
tags, ground-truth relevance) and ``two-moons-3d``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel

from mavias.core.synthetic.digits import DigitsConfig, make_digits
from mavias.core.synthetic.shapes import ShapesConfig, ShapeTexturesConfig, make_shapes
from mavias.core.synthetic.synthetic_scenes import (
    SyntheticScenesConfig,
    benchmark_vocabulary,
    ground_truth_relevance,
    make_synthetic_scenes,
)
from mavias.core.synthetic.two_moons import TwoMoons3DConfig, make_two_moons_3d


class Benchmark(NamedTuple):
    config: type[BaseModel]
    make: Callable[..., Path]  # make(out_dir, cfg) -> path of the main artifact
    group_attrs: tuple[str, ...] = ()  # attr_* columns of its manifest that, with the label, form the true groups


BIAS_ALIGNED = ("attr_bias_aligned",)
BENCHMARKS: dict[str, Benchmark] = {
    "synthetic-scenes": Benchmark(SyntheticScenesConfig, make_synthetic_scenes,
                                  ("attr_bg_aligned", "attr_coobj_aligned")),
    "shape-colours": Benchmark(ShapesConfig, make_shapes, BIAS_ALIGNED),
    "shape-textures": Benchmark(ShapeTexturesConfig, make_shapes, BIAS_ALIGNED),
    "digit-backgrounds": Benchmark(DigitsConfig, make_digits, BIAS_ALIGNED),
    "two-moons-3d": Benchmark(TwoMoons3DConfig, make_two_moons_3d),
}

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "DigitsConfig",
    "ShapeTexturesConfig",
    "ShapesConfig",
    "SyntheticScenesConfig",
    "TwoMoons3DConfig",
    "benchmark_vocabulary",
    "ground_truth_relevance",
    "make_digits",
    "make_shapes",
    "make_synthetic_scenes",
    "make_two_moons_3d",
]
