import pandas as pd
import pytest

from mavias.benchmarks import SyntheticScenesConfig, make_synthetic_scenes
from mavias.encode import SentenceTransformerEncoder
from mavias.judging.offline import OfflineJudge


@pytest.fixture(scope="session")
def scenes(tmp_path_factory) -> pd.DataFrame:
    """42 synthetic-scenes images with manifest tags; uris made absolute so any folder can hold a partition."""
    manifest = make_synthetic_scenes(
        tmp_path_factory.mktemp("scenes"), SyntheticScenesConfig(n_train=12, n_val=3, n_test_per_cell=1, image_size=32)
    )
    df = pd.read_parquet(manifest)
    return df.assign(uri=[str(manifest.parent / uri) for uri in df["uri"]])


@pytest.fixture(scope="session")
def encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder()


@pytest.fixture(scope="session")
def judge(encoder) -> OfflineJudge:
    return OfflineJudge(encoder=encoder)
