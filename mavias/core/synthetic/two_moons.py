"""3-D two moons (paper, supplement "Two-moon Distribution Experiment").

x1, x2 form the classic two moons and define the label; x3 is the bias: in train and val it sits near +1 for
``moon_1`` and -1 for ``moon_0`` (for an ``x3_align`` fraction of each class, the opposite sign otherwise), so it
separates the classes linearly. In test the sign of x3 is independent of the label (exactly half of each class
aligned), so a model that took the x3 shortcut drops to chance while one that learned the moons does not.
MAVias gives the projection layer x3 alone.

When the claim holds (measured, see BENCHMARKS.md): x3 must separate the training classes *strongly but not
perfectly*. With x3_align = 1 and x3_noise <= 0.3 the classes are (almost) perfectly separable along x3, the loss is
satisfied by x3 alone and no method learns the moons (all ~50% on test); with x3_align < 1 the conflicting samples
already force ERM to learn the moons. The defaults (x3_align = 1, x3_noise = 0.6, about 5% overlap along x3) are the
regime in which vanilla training leans on x3 and MAVias learns the moons.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from sklearn.datasets import make_moons

from mavias.core.manifest import ATTR_PREFIX, content_sample_id
from mavias.core.synthetic._sampling import stratified_flags
from mavias.utils.atomic import atomic_path, write_json

FEATURES_NAME = "features.parquet"
INFO_NAME = "benchmark.json"
FEATURE_COLUMNS = ("x1", "x2", "x3")
CLASS_NAMES = ("moon_0", "moon_1")


class TwoMoons3DConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    n_train: int = Field(2000, ge=2)
    n_val: int = Field(500, ge=2)
    n_test: int = Field(1000, ge=2)
    moon_noise: float = Field(0.15, ge=0.0, description="std of the Gaussian noise on x1, x2 (make_moons)")
    x3_noise: float = Field(0.6, ge=0.0, description="std of x3 around +-1, the class separation along x3")
    x3_align: float = Field(1.0, ge=0.0, le=1.0, description="fraction of train/val samples whose x3 mean agrees")
    seed: int = Field(0, ge=0)


def _split_features(split: str, n: int, cfg: TwoMoons3DConfig, rng: np.random.Generator) -> pd.DataFrame:
    moons, labels = make_moons(n_samples=n, noise=cfg.moon_noise, random_state=int(rng.integers(2**31)))
    aligned = stratified_flags(labels, 0.5 if split == "test" else cfg.x3_align, rng)
    class_sign = 2.0 * labels - 1.0
    x3 = np.where(aligned, class_sign, -class_sign) + rng.normal(0.0, cfg.x3_noise, n)
    return pd.DataFrame(
        {
            "x1": moons[:, 0],
            "x2": moons[:, 1],
            "x3": x3,
            "label": np.asarray(CLASS_NAMES)[labels],
            "split": split,
            # observed agreement (sign of x3 vs class), what a model sees: noise flips some planned-aligned samples
            f"{ATTR_PREFIX}x3_aligned": np.where(np.sign(x3) == class_sign, "1", "0"),
        }
    )


def _row_sample_id(x1: float, x2: float, x3: float, label: str) -> str:
    return content_sample_id(np.array([x1, x2, x3], dtype=np.float64).tobytes() + label.encode())


def make_two_moons_3d(out_dir: str | Path, cfg: TwoMoons3DConfig | None = None) -> Path:
    """Write ``features.parquet`` (and ``benchmark.json``) under ``out_dir``; return the features path."""
    cfg = cfg or TwoMoons3DConfig()
    rng = np.random.default_rng(cfg.seed)
    sizes = {"train": cfg.n_train, "val": cfg.n_val, "test": cfg.n_test}
    features = pd.concat([_split_features(split, n, cfg, rng) for split, n in sizes.items()], ignore_index=True)
    sample_ids = [_row_sample_id(*row) for row in features[[*FEATURE_COLUMNS, "label"]].itertuples(index=False)]
    features.insert(0, "sample_id", sample_ids)
    out_dir = Path(out_dir)
    path = out_dir / FEATURES_NAME
    with atomic_path(path) as tmp:
        features.to_parquet(tmp, index=False)
    info = {"benchmark": "two-moons-3d", "config": cfg.model_dump(mode="json"), "classes": list(CLASS_NAMES)}
    write_json(out_dir / INFO_NAME, info | {"counts": features.groupby("split").size().to_dict()})
    return path
