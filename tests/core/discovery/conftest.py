import pandas as pd
import pytest

from mavias.core.synthetic import SyntheticScenesConfig, make_synthetic_scenes


@pytest.fixture(scope="session")
def scenes(tmp_path_factory) -> pd.DataFrame:
    """42 synthetic-scenes images with manifest tags; uris made absolute so any folder can hold a partition."""
    manifest = make_synthetic_scenes(
        tmp_path_factory.mktemp("scenes"), SyntheticScenesConfig(n_train=12, n_val=3, n_test_per_cell=1, image_size=32)
    )
    df = pd.read_parquet(manifest)
    return df.assign(uri=[str(manifest.parent / uri) for uri in df["uri"]])
