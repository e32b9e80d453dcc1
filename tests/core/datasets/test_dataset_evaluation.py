"""Imported paper datasets evaluated by their declared protocol: ImageNet-9 variants + BG-gap, CelebA cell metrics."""

from __future__ import annotations

import pandas as pd
import pytest

from mavias.core.datasets import SplitOptions, import_celeba, import_imagefolder, import_imagenet9, write_import
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.datasets.imagenet9 import VARIANTS
from mavias.core.evaluate import accuracy
from mavias.core.manifest import read_dataset_info
from mavias.core.protocol import evaluate_checkpoint
from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import TrainConfig
from mavias.core.train.inference import predict
from mavias.core.train.prepare import prepare_image_data
from tests.core.datasets.layout_trees import IN9_CLASSES, celeba_cells, write_celeba, write_imagenet9
from tests.support.training import make_trainer

NO_RELEVANCE = pd.DataFrame(columns=["class", "tag", "relevant", "source"])
NO_TAGS = pd.DataFrame(columns=["sample_id", "tag"])
CFG = TrainConfig.model_validate({"method": "erm", "backbone": {"width": 4}, "epochs": 1, "batch_size": 8,
                                  "image_size": 16, "selection": "val_acc", "device": "cpu"})


def _train(manifest_path, out, group_attrs=None):
    data = prepare_image_data(manifest_path, relevance=NO_RELEVANCE, encoder=None, store_dir=None, config=CFG,
                              tags_table=NO_TAGS, group_attrs=group_attrs, progress=False)
    run = make_trainer(CFG, data["train"], data["val"], data.classes, out, progress=False).fit()
    return data, run.checkpoint("val_acc")


@pytest.mark.slow
def test_imagenet9_reports_every_variant_and_the_bg_gap(tmp_path):
    root = write_imagenet9(tmp_path / "in9", VARIANTS)
    train = write_imagefolder(tmp_path / "in9l", {c: 3 for c in IN9_CLASSES}, splits=("train", "val", "test"))
    path = write_import(import_imagenet9(root, train_root=train, progress=False), tmp_path / "ds")
    data, checkpoint = _train(path, tmp_path / "run")
    result = evaluate_checkpoint(data, checkpoint, None, dataset=read_dataset_info(path), n_boot=10)
    accs = result["imagenet9"]["variant_accuracy"]
    assert list(accs) == list(VARIANTS)
    model, _, _ = load_main_model(checkpoint)
    assert accs["mixed_rand"] == accuracy(predict(model, data["mixed_rand"]))
    assert result["validation_accuracy"] == accuracy(predict(model, data["val"]))  # what the gates compare
    assert result["imagenet9"]["bg_gap"] == pytest.approx(accs["mixed_same"] - accs["mixed_rand"])


@pytest.mark.slow
def test_celeba_protocol_reports_cell_metrics(tmp_path):
    write_celeba(tmp_path / "celeba", celeba_cells(3))
    path = write_import(import_celeba(tmp_path / "celeba", progress=False), tmp_path / "ds")
    data, checkpoint = _train(path, tmp_path / "run", ["attr_male"])
    info = read_dataset_info(path)
    result = evaluate_checkpoint(data, checkpoint, None, closed_set_attrs=info.group_attrs, dataset=info, n_boot=10)
    cells = result["celeba"]["cell_accuracy"]
    assert len(cells) == 4
    assert result["celeba"]["unbiased_accuracy"] == pytest.approx(sum(cells.values()) / 4)


def test_a_model_of_other_classes_is_not_comparable_and_says_so(tmp_path):
    """The nightly leaves production out of the comparison on this error (a ValueError) when a class arrives."""
    first = write_import(imagefolder_import(tmp_path / "two", {"cat": 4, "dog": 4}), tmp_path / "ds2")
    _, checkpoint = _train(first, tmp_path / "run")
    grown = write_import(imagefolder_import(tmp_path / "three", {"cat": 4, "dog": 4, "owl": 4}), tmp_path / "ds3")
    data = prepare_image_data(grown, relevance=NO_RELEVANCE, encoder=None, store_dir=None, config=CFG,
                              tags_table=NO_TAGS, progress=False)
    with pytest.raises(ValueError, match=r"trained on classes \['cat', 'dog'\], the data has \['cat', 'dog', 'owl'\]"):
        evaluate_checkpoint(data, checkpoint, None, n_boot=10)


def imagefolder_import(root, counts):
    folder = write_imagefolder(root, counts, splits=("train", "val", "test"))
    return import_imagefolder(folder, SplitOptions(split_from=True), progress=False)
