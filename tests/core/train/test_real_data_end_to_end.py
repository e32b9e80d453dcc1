"""A user's own ImageFolder: import, train with augmentation (OpenCLIP text encoder), export ONNX, and check that a
client applying the declared evaluation preprocessing with PIL + numpy gets the model's logits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.manifest import load_manifest
from mavias.core.relevance import save_relevance
from mavias.core.tagging.base import write_tags
from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import load_config
from mavias.core.train.inference import predict_logits
from mavias.core.train.prepare import prepare_image_data
from mavias.core.train.transforms import describe_eval_preprocessing
from mavias.ops.export.exporter import INPUT_NAME, OUTPUT_NAME, export_onnx
from mavias.ops.export.parity import verify_onnx
from mavias.ops.export.session import make_session
from mavias.ops.serve.preprocess import Preprocessing, preprocess

SETTINGS = {"method": "mavias", "encoder": "openclip:ViT-S-32/none", "backbone.name": "small_cnn", "backbone.width": 8,
            "image_size": 32, "preprocessing.augment": "true", "preprocessing.resize": 36, "epochs": 2,
            "batch_size": 8, "selection": "val_acc", "device": "cpu"}


def _invoke(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result.output


@pytest.mark.slow
def test_imagefolder_import_train_export_parity(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 12, "dog": 12}, size=(48, 40))
    _invoke(["data", "import", "imagefolder", str(root), "--out", str(tmp_path / "ds"), "--val", "0.25", "--test", "0.25"])
    manifest_path = tmp_path / "ds" / "manifest.parquet"
    manifest = load_manifest(manifest_path)
    tags = pd.DataFrame({"sample_id": manifest["sample_id"], "tag": np.where(np.arange(len(manifest)) % 2, "grass", "sofa"),
                         "score": 1.0})
    write_tags(tags, tmp_path / "tags.parquet")
    save_relevance(pd.DataFrame([(c, t, False, "test") for c in ("cat", "dog") for t in ("grass", "sofa")],
                                columns=["class", "tag", "relevant", "source"]), tmp_path / "relevance.parquet")
    common = ["--manifest", str(manifest_path), "--relevance", str(tmp_path / "relevance.parquet"),
              "--tags", str(tmp_path / "tags.parquet"), "--workspace", str(tmp_path / "ws")]
    run = tmp_path / "run"
    _invoke(["train", *common, "--out", str(run), *[a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]])
    cfg = load_config(run / "config.yaml")
    assert cfg.preprocessing.augment and cfg.encoder == SETTINGS["encoder"]  # the resolved config records both
    assert list((tmp_path / "ws" / "embeddings").iterdir())  # bias embeddings from the configured encoder

    model, classes, _ = load_main_model(run / "best_val_acc.pt")
    onnx_path = export_onnx(model, tmp_path / "model.onnx", image_size=cfg.image_size)
    description = describe_eval_preprocessing(cfg)
    test = manifest[manifest["split"] == "test"].reset_index(drop=True)
    client = np.stack([preprocess(Image.open(uri), Preprocessing.model_validate(description)) for uri in test["uri"]])
    assert verify_onnx(onnx_path, model, torch.from_numpy(client)).passed
    (served,) = make_session(onnx_path).run([OUTPUT_NAME], {INPUT_NAME: client})
    prepared = prepare_image_data(manifest_path, relevance=pd.DataFrame(columns=["class", "tag", "relevant", "source"]),
                                  encoder=None, store_dir=None, config=cfg, tags_table=tags.iloc[:0], progress=False)
    trained_path = predict_logits(model, prepared["test"]).numpy()  # the evaluation pipeline of the trainer
    np.testing.assert_allclose(served, trained_path, atol=1e-4)

    _invoke(["evaluate", "--run", str(run), *common, "--criterion", "val_acc"])
    assert (run / "eval-test-val_acc" / "metrics.json").exists()
