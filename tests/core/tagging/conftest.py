from pathlib import Path

import pandas as pd
import pytest

from mavias.core.encode.openclip import OpenClip
from mavias.core.synthetic import SyntheticScenesConfig, benchmark_vocabulary, make_synthetic_scenes

TINY_MODEL = "ViT-S-32"  # the smallest architecture in open_clip's configs
SCENES = SyntheticScenesConfig(n_train=12, n_val=3, n_test_per_cell=1, image_size=32)


@pytest.fixture(scope="session")
def scenes_manifest(tmp_path_factory) -> Path:
    """42 synthetic-scenes images with manifest tags."""
    return make_synthetic_scenes(tmp_path_factory.mktemp("scenes"), SCENES)


@pytest.fixture(scope="session")
def scenes(scenes_manifest) -> pd.DataFrame:
    return pd.read_parquet(scenes_manifest)


@pytest.fixture(scope="session")
def vocabulary() -> list[str]:
    """A third of the benchmark's vocabulary: CLIP's text tower is the slow part on CPU."""
    return benchmark_vocabulary(SCENES.classes)[::3]


@pytest.fixture(scope="session")
def vocab_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vocab-cache")


@pytest.fixture(scope="session")
def clip() -> OpenClip:
    return OpenClip(TINY_MODEL, None, device="cpu")
