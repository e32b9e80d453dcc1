"""`mavias export`: a run's checkpoint as verified ONNX with its model card; user mistakes end in one message."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import TrainConfig, save_config
from mavias.ops.export.session import make_session
from tests.ops.serve.conftest import CLASSES, SIZE, write_checkpoint

runner = CliRunner()


def test_export_a_run_writes_verified_onnx_and_the_card(tmp_path):
    run = tmp_path / "run"
    selected = run / f"best_{TrainConfig().selection}.pt"  # the run's own selection criterion
    write_checkpoint(selected, seed=1)
    write_checkpoint(run / "best_val_acc.pt", seed=2)
    save_config(TrainConfig.model_validate(torch.load(selected, weights_only=True)["config"]), run / "config.yaml")
    out = tmp_path / "served" / "model.onnx"
    result = runner.invoke(app, ["export", "--run", str(run), "--out", str(out), "--name", "scenes"])
    assert result.exit_code == 0, result.output
    card = json.loads((out.parent / "model_card.json").read_text())
    assert card["classes"] == CLASSES and card["version"] == "run"
    assert card["verification"]["passed"] and card["verification"]["max_abs_diff"] <= 1e-4
    assert card["preprocessing"]["center_crop"] == SIZE and card["preprocessing"]["normalisation"]["in_model"]
    model, _, _ = load_main_model(selected)  # the run's selection was exported, not another criterion's checkpoint
    x = torch.rand(3, 3, SIZE, SIZE)
    with torch.no_grad():
        expected = model(x).numpy()
    got = make_session(out).run(["logits"], {"image": x.numpy()})[0]
    assert np.abs(got - expected).max() <= 1e-4


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "m.onnx"], "exactly one of --run"),
    (["--run", "missing", "--out", "m.onnx", "--criterion", "val_acc"], "is not a run folder"),
    (["--run", ".", "--out", "m.onnx", "--criterion", "nope"], "holds no checkpoint"),
    (["--run", "run", "--out", "m.onnx", "--criterion", "nope"], "unknown criterion"),
    (["--run", "run", "--out", "m.onnx"], "holds no config.yaml to name its selection criterion"),
    (["--checkpoint", "missing.pt", "--out", "m.onnx"], "does not exist"),
    (["--checkpoint", ".", "--out", "m.onnx"], "is a folder (pass it with --run)"),
    (["--run", ".", "--out", "m.onnx"], "holds no checkpoint: it is not a run folder of `mavias train`"),
    (["--run", ".", "--out", "m.onnx", "--criterion", "val_acc"], "holds no checkpoint"),
])
def test_mistakes_are_user_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.pt").write_bytes(b"")
    result = runner.invoke(app, ["export", *args])
    assert result.exit_code != 0
    assert message in str(result.exception) + result.output
