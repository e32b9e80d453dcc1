"""ONNX Runtime sessions for verification, benchmarks and serving (onnxruntime + numpy only: no torch here)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import onnxruntime as ort

PREFERRED_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")
# TF32 would round convolution inputs to 10 mantissa bits on Ampere+ GPUs: far beyond a 1e-4 logit tolerance.
PROVIDER_OPTIONS = {"CUDAExecutionProvider": {"use_tf32": "0"}}


def available_providers() -> list[str]:
    """CUDA when onnxruntime-gpu sees a GPU, then CPU."""
    _load_cuda_libraries()
    available = set(ort.get_available_providers())
    return [p for p in PREFERRED_PROVIDERS if p in available]


@functools.cache
def _load_cuda_libraries() -> None:
    """The CUDA and cuDNN libraries of the NVIDIA PyPI packages (onnxruntime-gpu[cuda,cudnn], or torch's), found where
    no CUDA toolkit is installed, e.g. in the serving image; a no-op where the build has no CUDA."""
    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()


def make_session(
    onnx_path: str | Path, *, providers: Sequence[str] | None = None, intra_op_threads: int | None = None
) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    if intra_op_threads:
        options.intra_op_num_threads = intra_op_threads
    names = list(providers or available_providers())
    with_options = [(name, PROVIDER_OPTIONS.get(name, {})) for name in names]
    return ort.InferenceSession(str(onnx_path), sess_options=options, providers=with_options)
