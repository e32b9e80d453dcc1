import json

import numpy as np
import pandas as pd
import pytest

from mavias.core.synthetic import TwoMoons3DConfig, make_two_moons_3d

CFG = TwoMoons3DConfig(n_train=2000, n_val=400, n_test=2000, x3_noise=0.3, x3_align=0.9, seed=5)


@pytest.fixture(scope="module")
def features(tmp_path_factory) -> pd.DataFrame:
    return pd.read_parquet(make_two_moons_3d(tmp_path_factory.mktemp("moons"), CFG))


def _x3_sign_accuracy(rows: pd.DataFrame) -> float:
    return float(np.mean((rows["x3"] > 0) == (rows["label"] == "moon_1")))


def test_columns_counts_and_unique_ids(features):
    assert list(features.columns) == ["sample_id", "x1", "x2", "x3", "label", "split", "attr_x3_aligned"]
    assert features["split"].value_counts().to_dict() == {"train": 2000, "test": 2000, "val": 400}
    assert set(features["label"]) == {"moon_0", "moon_1"}
    assert features["sample_id"].is_unique


def test_x3_separates_the_classes_in_train_and_val(features):
    for split in ("train", "val"):
        rows = features[features["split"] == split]
        assert _x3_sign_accuracy(rows) == pytest.approx(CFG.x3_align, abs=0.01)
        observed = (rows["attr_x3_aligned"] == "1").groupby(rows["label"]).mean()
        assert observed.tolist() == pytest.approx([0.9, 0.9], abs=0.01)  # noise 0.3 flips almost no sign


def test_x3_is_independent_of_the_label_in_test(features):
    test = features[features["split"] == "test"]
    assert _x3_sign_accuracy(test) == pytest.approx(0.5, abs=0.03)
    assert abs(np.corrcoef(test["x3"], test["label"] == "moon_1")[0, 1]) < 0.05
    assert (test["attr_x3_aligned"] == "1").groupby(test["label"]).mean().tolist() == pytest.approx([0.5, 0.5], abs=0.03)


def test_the_moons_still_define_the_label(features):
    upper_moon = features["x2"] > 0.25  # moon_0 is the upper arc, moon_1 the lower one
    agreement = np.mean(upper_moon == (features["label"] == "moon_0"))
    assert agreement > 0.8


def test_same_seed_same_rows_other_seed_differs(tmp_path):
    small = TwoMoons3DConfig(n_train=50, n_val=10, n_test=20, seed=1)
    first = make_two_moons_3d(tmp_path / "a", small)
    assert first.read_bytes() == make_two_moons_3d(tmp_path / "b", small).read_bytes()
    other = pd.read_parquet(make_two_moons_3d(tmp_path / "c", small.model_copy(update={"seed": 2})))
    assert set(other["sample_id"]).isdisjoint(pd.read_parquet(first)["sample_id"])
    info = json.loads((tmp_path / "a" / "benchmark.json").read_text())
    assert TwoMoons3DConfig(**info["config"]) == small
