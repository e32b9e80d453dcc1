"""The bias-unaware methods never read a bias label: with every attr_* column of the manifest shuffled, training,
tuning and selection come out identical (only the oracle's criterion, val_true_wg, may change)."""

import numpy as np
import pandas as pd
import pytest

from mavias.core.manifest import ATTR_PREFIX, load_manifest, save_manifest
from mavias.core.protocol import train_method, train_reference
from mavias.core.relevance import load_relevance
from mavias.core.synthetic import Sources, make_benchmark
from mavias.core.synthetic.shapes import ShapesConfig
from mavias.core.train.config import TrainConfig
from mavias.core.train.prepare import prepare_image_data
from mavias.core.tune.search import tune

CFG = ShapesConfig(n_classes=3, n_train=90, n_val=45, n_test_per_cell=1, image_size=16)
SETTINGS = {"backbone": {"name": "small_cnn", "width": 4}, "epochs": 2, "batch_size": 16, "optim": {"lr": 0.05}}


def _shuffled(manifest_path, out):
    manifest = load_manifest(manifest_path)
    rng = np.random.default_rng(1)
    for column in [c for c in manifest.columns if c.startswith(ATTR_PREFIX)]:
        manifest[column] = rng.permutation(manifest[column].to_numpy())
    manifest["uri"] = [str(manifest_path.parent / uri) for uri in manifest["uri"]]
    return save_manifest(manifest, out / "manifest.parquet")


def _run(manifest_path, relevance, out):
    data = prepare_image_data(manifest_path, relevance=relevance, encoder=None, store_dir=None,
                              config=TrainConfig(image_size=16), group_attrs=["attr_bias_aligned"], progress=False)
    data["train"].embeddings = data["val"].embeddings = None  # JTT and tuning need none
    reference = train_reference(data, TrainConfig.model_validate(SETTINGS), out / "erm", progress=False)
    jtt = train_method(data, TrainConfig.model_validate({**SETTINGS, "method": "jtt", "jtt": {"id_epochs": 1}}),
                       out / "jtt", reference, progress=False)
    tuned = tune(data, reference, TrainConfig.model_validate({**SETTINGS, "method": "sd"}), out / "tune", trials=2)
    return reference, jtt, tuned


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shapes")
    manifest = make_benchmark("shape-colours", folder, CFG, Sources(tags="oracle", relevance="oracle"))
    relevance = load_relevance(folder / "relevance.parquet")
    shuffled_dir = tmp_path_factory.mktemp("shuffled")
    return (_run(manifest, relevance, tmp_path_factory.mktemp("plain")),
            _run(_shuffled(manifest, shuffled_dir), relevance, tmp_path_factory.mktemp("shuffled-runs")))


def _label_free(history: pd.DataFrame) -> pd.DataFrame:
    return history.drop(columns=["val_true_wg", "seconds"], errors="ignore")


def test_shuffled_bias_labels_change_nothing_a_bias_unaware_method_does(runs):
    (reference, jtt, tuned), (reference2, jtt2, tuned2) = runs
    assert reference.biased_tags.equals(reference2.biased_tags)
    for plain, shuffled in ((reference.run, reference2.run), (jtt, jtt2)):
        pd.testing.assert_frame_equal(_label_free(plain.history), _label_free(shuffled.history))
        assert set(plain.best) == set(shuffled.best)
        for criterion in set(plain.best) - {"val_true_wg"}:
            assert plain.best[criterion] == shuffled.best[criterion], criterion
    assert tuned.best_params == tuned2.best_params and tuned.best_value == tuned2.best_value
