"""ONNX export of the main model: round trip through ONNX Runtime, no projection weights, the model card."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import BackboneConfig, TrainConfig
from mavias.core.train.model import MainModel, build_main_model, build_projection
from mavias.errors import UserError
from mavias.ops.export.exporter import ExportError, describe_onnx, export_onnx
from mavias.ops.export.latency import export_latency_benchmark
from mavias.ops.export.parity import ExportVerificationError, VerificationResult, verify_onnx
from mavias.ops.export.session import make_session
from mavias.ops.export.version import build_model_card, export_checkpoint, export_verified
from mavias.ops.gates import evaluate_gates
from mavias.ops.registry.model_card import lineage_from_files, write_model_card
from mavias.utils.disk import sha256_file
from tests.ops.gates.test_gates import CONFIG, evaluation

SIZE = 32
CLASSES = ["bird", "dog", "vehicle"]
TRAIN_CONFIG = TrainConfig(method="mavias", backbone=BackboneConfig(name="small_cnn", width=4), image_size=SIZE)


def _randomise_batch_norm(model: nn.Module) -> None:
    """Non-trivial running statistics, so folding batch norm into the convolutions is actually exercised."""
    generator = torch.Generator().manual_seed(0)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)


def _model() -> MainModel:
    torch.manual_seed(0)
    model = build_main_model(TRAIN_CONFIG.backbone, 3, len(CLASSES))
    _randomise_batch_norm(model)
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[MainModel, object]:
    model = _model()
    return model, export_onnx(model, tmp_path_factory.mktemp("onnx") / "model.onnx", image_size=SIZE)


def test_round_trip_with_dynamic_batch(exported):
    model, path = exported
    session = make_session(path)
    for batch in (1, 5):
        x = torch.rand(batch, 3, SIZE, SIZE)
        (got,) = session.run(["logits"], {"image": x.numpy()})
        with torch.no_grad():
            expected = model(x).numpy()
        assert got.shape == (batch, len(CLASSES))
        assert np.abs(got - expected).max() <= 1e-4
        assert (got.argmax(1) == expected.argmax(1)).all()
    assert describe_onnx(path) == {
        "opset": 17,
        "inputs": [{"name": "image", "dtype": "float32", "shape": ["batch", 3, SIZE, SIZE]}],
        "outputs": [{"name": "logits", "dtype": "float32", "shape": ["batch", len(CLASSES)]}],
    }


def test_verify_on_held_out_uint8_images(exported):
    model, path = exported
    images = torch.randint(0, 256, (7, 3, SIZE, SIZE), dtype=torch.uint8)
    result = verify_onnx(path, model, images, batch_size=4)
    assert result.passed and result.argmax_equal and result.max_abs_diff <= 1e-4
    assert result.n == 7 and "CPUExecutionProvider" in result.providers
    assert VerificationResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_the_parity_tolerance_scales_with_the_logits():
    """fp32 noise grows with the logits (a resnet18 with logits up to 122 differed by 1e-4, 8e-7 of them): the
    tolerance is atol + rtol * max |logit|, so large logits pass their noise and a real mismatch still fails."""
    def result(diff: float, scale: float) -> VerificationResult:
        return VerificationResult(diff, True, 81, ["CPUExecutionProvider"], 1e-4, 1e-5, scale)

    assert result(9.9e-5, 1.0).passed and not result(2e-4, 1.0).passed
    assert result(1e-3, 122.0).passed and result(1e-3, 122.0).tolerance == pytest.approx(1.32e-3)
    assert not result(0.05, 122.0).passed
    assert VerificationResult.from_dict({"max_abs_diff": 5e-5, "argmax_equal": True, "n": 1, "providers": [],
                                         "atol": 1e-4, "passed": True}).passed  # a record written before rtol


def test_verify_rejects_a_graph_of_another_model(exported):
    model, path = exported
    other = _model()
    with torch.no_grad():
        other.head.bias[0] += 1.0
    with pytest.raises(ExportVerificationError) as error:
        verify_onnx(path, other, torch.rand(4, 3, SIZE, SIZE))
    assert error.value.result.max_abs_diff == pytest.approx(1.0, abs=1e-4)


def test_export_leaves_the_callers_model_alone(tmp_path):
    model = _model().train()
    export_onnx(model, tmp_path / "model.onnx", image_size=SIZE)
    assert model.training


def test_mavias_checkpoint_exports_without_the_projection(tmp_path):
    main = _model()
    projection = build_projection(24, main.feature_dim)
    checkpoint = tmp_path / "last.pt"
    torch.save({"modules": {"model": main.state_dict(), "projection": projection.state_dict()},
                "config": TRAIN_CONFIG.model_dump(mode="json"), "classes": CLASSES}, checkpoint)
    model, classes, _ = load_main_model(checkpoint)
    path = export_onnx(model, tmp_path / "model.onnx", image_size=SIZE)
    weights = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer]
    for p in projection.parameters():
        p = p.detach().numpy()
        assert not any(w.shape == p.shape and np.allclose(w, p) for w in weights)
    assert classes == CLASSES


def _checkpoint(path, model: MainModel):
    torch.save({"modules": {"model": model.state_dict()}, "config": TRAIN_CONFIG.model_dump(mode="json"),
                "classes": CLASSES}, path)
    return path


def test_nan_logits_never_pass_verification_and_never_replace_a_verified_graph(tmp_path):
    out = tmp_path / "v1" / "model.onnx"
    out.parent.mkdir()
    export_checkpoint(_checkpoint(tmp_path / "good.pt", _model()), out, name="m", version="v1")
    verified = out.read_bytes()
    broken = _model()
    with torch.no_grad():
        broken.head.bias[0] = float("nan")
    with pytest.raises(ExportVerificationError, match="NaN or infinite logits") as raised:
        verify_onnx(export_onnx(broken, tmp_path / "nan.onnx", image_size=SIZE), broken, torch.rand(4, 3, SIZE, SIZE))
    assert not raised.value.result.passed and not raised.value.result.finite
    with pytest.raises(UserError, match="NaN or infinite logits"):
        export_checkpoint(_checkpoint(tmp_path / "nan.pt", broken), out, name="m", version="v1")
    assert out.read_bytes() == verified and sorted(p.name for p in out.parent.iterdir()) == ["model.onnx",
                                                                                            "model_card.json"]


def test_a_packaged_graph_that_fails_verification_leaves_no_model_file_behind(tmp_path):
    broken = _model()
    with torch.no_grad():
        broken.head.bias[0] = float("nan")
    out = tmp_path / "v1" / "model.onnx"  # the nightly package's folder, empty until its graph is verified
    with pytest.raises(ExportVerificationError, match="NaN or infinite logits"):
        export_verified(broken, out, torch.rand(4, 3, SIZE, SIZE), image_size=SIZE)
    assert [p.name for p in out.parent.iterdir()] == []


def test_a_model_in_double_precision_exports_as_the_float32_graph_served(tmp_path):
    model = _model().double()
    path = export_onnx(model, tmp_path / "model.onnx", image_size=SIZE)
    assert verify_onnx(path, model, torch.rand(3, 3, SIZE, SIZE)).passed
    assert next(model.parameters()).dtype == torch.float64  # the caller's model is left as it was


class _WithProjection(nn.Module):
    def __init__(self, main: MainModel):
        super().__init__()
        self.main, self.projection = main, build_projection(main.feature_dim, main.feature_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x)


class _SmuggledProjection(MainModel):
    """A MainModel whose forward also runs a projection: its weights would end up in the graph."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        return self.head(h + self.projection(h))


def test_anything_but_the_main_model_is_refused(tmp_path):
    with pytest.raises(ExportError, match="only the main model"):
        export_onnx(_WithProjection(_model()), tmp_path / "a.onnx", image_size=SIZE)
    base = _model()
    smuggler = _SmuggledProjection(base.backbone, base.feature_dim, len(CLASSES), image_input=True)
    smuggler.projection = build_projection(base.feature_dim, base.feature_dim)
    with pytest.raises(ExportError, match="more than backbone"):
        export_onnx(smuggler, tmp_path / "b.onnx", image_size=SIZE)
    assert not (tmp_path / "b.onnx").exists()


def test_model_card_records_hashes_gates_and_lineage(exported, tmp_path):
    model, path = exported
    manifest = tmp_path / "manifest.parquet"
    manifest.write_bytes(b"not really parquet")
    verification = verify_onnx(path, model, torch.rand(3, 3, SIZE, SIZE))
    gates = evaluate_gates(evaluation(0.8), evaluation(0.6), None, CONFIG)
    card = build_model_card(
        name="imagenet9", version="2025-06-01T02-00", classes=CLASSES, onnx_path=path, verification=verification,
        evaluation=evaluation(0.8) | {"tables": {}, "predictions": None}, gates=gates, train_config=TRAIN_CONFIG,
        lineage=lineage_from_files(["2025-06-01", "2025-05-31"], {"manifest": manifest}),
    )
    card_path = write_model_card(tmp_path / "model_card.json", card)
    loaded = json.loads(card_path.read_text())
    assert loaded["onnx"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() == sha256_file(path)
    assert loaded["onnx"]["opset"] == 17 and loaded["input"]["shape"] == ["batch", 3, SIZE, SIZE]
    assert loaded["data_lineage"] == {"partitions": ["2025-05-31", "2025-06-01"],
                                      "artifacts": {"manifest": hashlib.sha256(b"not really parquet").hexdigest()}}
    assert [g["name"] for g in loaded["gates"]["gates"]] == [r.name for r in gates.results]
    assert {"value", "threshold", "status"} <= set(loaded["gates"]["gates"][0])
    assert "tables" not in loaded["metrics"] and loaded["verification"]["passed"]
    assert loaded["training"]["method"] == "mavias" and loaded["classes"] == CLASSES


def test_latency_benchmark_reports_both_runtimes():
    result = export_latency_benchmark(_model(), SIZE, batches=(1, 2), threads=1, runs=3, budget_s=1.0)
    assert [r["batch"] for r in result["results"]] == [1, 2]
    assert all(r["torch_eager_ms"] > 0 and r["onnx_ms"] > 0 for r in result["results"])
    assert result["threads"] == 1 and isinstance(result["meets_goal"], bool)
