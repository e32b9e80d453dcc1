"""Parity of an exported graph with PyTorch: ONNX Runtime and the main model must agree on held-out images.

The tolerance scales with the logits: ``atol + rtol * max |logit|``. Two fp32 runtimes summing in different orders
differ by about 1e-6 of the logits' size (a resnet18 whose logits reach 120 differed by 1e-4, 8e-7 of them), while a
real mismatch (preprocessing, a layer in training mode) differs by far more than ``rtol`` = 1e-5 of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from mavias.core.train.model import MainModel
from mavias.ops.export.exporter import INPUT_NAME, OUTPUT_NAME, ExportError, cpu_eval_copy, require_image_model
from mavias.ops.export.session import make_session
from mavias.ops.export.verification import VerificationResult

VERIFY_BATCH = 64


class ExportVerificationError(ExportError):
    def __init__(self, message: str, result: VerificationResult):
        super().__init__(message)
        self.result = result


def _as_float_images(images: torch.Tensor) -> torch.Tensor:
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"expected images [N, 3, H, W], got {tuple(images.shape)}")
    return images.float() / 255.0 if images.dtype == torch.uint8 else images.float()


def verify_onnx(
    onnx_path: str | Path,
    model: MainModel,
    images: torch.Tensor,
    *,
    atol: float = 1e-4,
    rtol: float = 1e-5,
    providers: Sequence[str] | None = None,
    batch_size: int = VERIFY_BATCH,
) -> VerificationResult:
    """Compare ONNX Runtime and PyTorch (fp32, CPU) logits on held-out images (uint8 or float in [0, 1]).

    Raises :class:`ExportVerificationError` when the max abs logit difference exceeds ``atol + rtol * max |logit|``
    or an argmax differs.
    """
    x = _as_float_images(images)
    if len(x) == 0:
        raise ValueError("verification needs at least one held-out image")
    reference = cpu_eval_copy(require_image_model(model))
    session = make_session(onnx_path, providers=providers)
    max_diff, argmax_equal, scale, finite = 0.0, True, 0.0, True
    with torch.inference_mode():
        for batch in x.split(batch_size):
            expected = reference(batch).numpy()
            (got,) = session.run([OUTPUT_NAME], {INPUT_NAME: batch.numpy()})
            finite &= bool(np.isfinite(got).all() and np.isfinite(expected).all())
            if finite:
                max_diff = max(max_diff, float(np.abs(got - expected).max()))
                scale = max(scale, float(np.abs(expected).max()))
            argmax_equal &= bool((got.argmax(1) == expected.argmax(1)).all())
    result = VerificationResult(max_diff, argmax_equal, len(x), session.get_providers(), atol, rtol, scale, finite)
    if not finite:
        raise ExportVerificationError(f"{onnx_path}: NaN or infinite logits (ONNX Runtime or PyTorch) on {len(x)} "
                                      "held-out images: the model cannot be served", result)
    if not result.passed:
        raise ExportVerificationError(
            f"{onnx_path}: ONNX Runtime disagrees with PyTorch on {len(x)} images (max |logit diff| {max_diff:.2e}, "
            f"tolerance {result.tolerance:.1e} for logits up to {scale:.3g}, argmax equal: {argmax_equal})",
            result,
        )
    return result
