"""ONNX export of the served model (backbone + head, never the projection g), its verification and a latency benchmark.

Exporter: the TorchScript-based ``torch.onnx.export(..., dynamo=False)`` with ``dynamic_axes``. The dynamo exporter
(torch's default since 2.9) needs ``onnxscript``, which the pipeline does not depend on; the TorchScript path works
offline for every backbone we ship (plain convolutions, batch norm, pooling, linear) and folds batch norm into the
convolutions in eval mode.
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

from mavias.pipeline.onnx_session import make_session
from mavias.train.model import MainModel
from mavias.utils.atomic import atomic_path

OPSET = 17
INPUT_NAME, OUTPUT_NAME, BATCH_AXIS = "image", "logits", "batch"
VERIFY_BATCH = 64
LATENCY_GOAL = 0.7  # ONNX Runtime median latency / PyTorch eager median latency


class ExportError(RuntimeError):
    pass


class ExportVerificationError(ExportError):
    def __init__(self, message: str, result: VerificationResult):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class VerificationResult:
    max_abs_diff: float
    argmax_equal: bool
    n: int
    providers: list[str]
    atol: float

    @property
    def passed(self) -> bool:
        return self.argmax_equal and self.max_abs_diff <= self.atol

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"passed": self.passed}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> VerificationResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: v for k, v in document.items() if k != "passed"})


def _cpu_eval_copy(model: MainModel) -> MainModel:
    """A CPU copy in eval mode, so neither the caller's device nor its train/eval mode changes."""
    return copy.deepcopy(model).cpu().eval()


def _require_image_model(model: object) -> MainModel:
    if not isinstance(model, MainModel):
        raise ExportError(
            f"only the main model (backbone + head) is served; got {type(model).__name__}. Export the MainModel from "
            "mavias.train.trainer.load_main_model, never a module holding the projection layer"
        )
    if not model.image_input:
        raise ExportError("only image models (NCHW RGB input) are exported; this main model takes feature vectors")
    return model


def _served_weight_count(model: MainModel) -> int:
    """Floating-point elements of what the served model consists of: backbone, head, normalisation constants."""
    tensors = [*model.backbone.state_dict().values(), *model.head.state_dict().values(), model.mean, model.std]
    return sum(t.numel() for t in tensors if t.is_floating_point())


def _check_graph(graph: onnx.ModelProto, model: MainModel) -> None:
    """One image input with a symbolic batch axis, one logits output, and no weights beyond the main model's.

    The weight budget is the backbone's and head's floating-point state (parameters + batch-norm statistics);
    folding batch norm into the convolutions only shrinks it, so extra weights (a projection layer) exceed it.
    """
    inputs = [i.name for i in graph.graph.input]
    outputs = [o.name for o in graph.graph.output]
    if inputs != [INPUT_NAME] or outputs != [OUTPUT_NAME]:
        raise ExportError(f"exported graph has inputs {inputs} and outputs {outputs}, expected [image] -> [logits]")
    batch_dim = graph.graph.input[0].type.tensor_type.shape.dim[0]
    if batch_dim.dim_param != BATCH_AXIS:
        raise ExportError("exported graph has a fixed batch size; the batch axis must be dynamic")
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
    weights = sum(int(np.prod(t.dims)) for t in graph.graph.initializer if t.data_type in float_types)
    budget = _served_weight_count(model)
    if weights > budget:
        raise ExportError(f"exported graph holds {weights} weights, more than backbone + head ({budget})")


def export_onnx(
    model: MainModel, out_path: str | Path, *, image_size: int, opset: int = OPSET, example_batch: int = 2
) -> Path:
    """Write ``model`` as ONNX: input ``image`` float32 [N, 3, H, W] in [0, 1], output ``logits`` [N, classes]."""
    model = _cpu_eval_copy(_require_image_model(model))
    example = torch.rand(example_batch, 3, image_size, image_size)
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is deprecated; chosen knowingly
        torch.onnx.export(
            model,
            (example,),
            str(tmp),
            dynamo=False,
            opset_version=opset,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: BATCH_AXIS}, OUTPUT_NAME: {0: BATCH_AXIS}},
        )
        graph = onnx.load(str(tmp))
        onnx.checker.check_model(graph)
        _check_graph(graph, model)
    return out_path


def describe_onnx(onnx_path: str | Path) -> dict[str, Any]:
    """Opset and input/output specs as stored in the file (symbolic axes by name)."""
    graph = onnx.load(str(onnx_path), load_external_data=False)

    def spec(value: onnx.ValueInfoProto) -> dict[str, Any]:
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        return {"name": value.name, "dtype": dtype, "shape": [d.dim_param or d.dim_value for d in tensor.shape.dim]}

    opset = next(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx"))
    inputs, outputs = [spec(v) for v in graph.graph.input], [spec(v) for v in graph.graph.output]
    return {"opset": opset, "inputs": inputs, "outputs": outputs}


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
    providers: Sequence[str] | None = None,
    batch_size: int = VERIFY_BATCH,
) -> VerificationResult:
    """Compare ONNX Runtime and PyTorch (fp32, CPU) logits on held-out images (uint8 or float in [0, 1]).

    Raises :class:`ExportVerificationError` when the max abs logit difference exceeds ``atol`` or an argmax differs.
    """
    x = _as_float_images(images)
    if len(x) == 0:
        raise ValueError("verification needs at least one held-out image")
    reference = _cpu_eval_copy(_require_image_model(model))
    session = make_session(onnx_path, providers=providers)
    max_diff, argmax_equal = 0.0, True
    with torch.inference_mode():
        for batch in x.split(batch_size):
            expected = reference(batch).numpy()
            (got,) = session.run([OUTPUT_NAME], {INPUT_NAME: batch.numpy()})
            max_diff = max(max_diff, float(np.abs(got - expected).max()))
            argmax_equal &= bool((got.argmax(1) == expected.argmax(1)).all())
    result = VerificationResult(max_diff, argmax_equal, len(x), session.get_providers(), atol)
    if not result.passed:
        raise ExportVerificationError(
            f"{onnx_path}: ONNX Runtime disagrees with PyTorch on {len(x)} images "
            f"(max |logit diff| {max_diff:.2e}, atol {atol:.0e}, argmax equal: {argmax_equal})",
            result,
        )
    return result


def wall_times_ms(
    call: Callable[[], object], *, runs: int, warmup: int, budget_s: float, min_runs: int = 3
) -> list[float]:
    """Wall times of ``call`` in ms over ``runs`` runs, or fewer (at least ``min_runs``) once ``budget_s`` has passed."""
    for _ in range(warmup):
        call()
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < runs and (len(times) < min_runs or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _median_ms(call: Callable[[], object], *, runs: int, warmup: int, budget_s: float) -> float:
    return statistics.median(wall_times_ms(call, runs=runs, warmup=warmup, budget_s=budget_s))


def torch_latency(
    model: MainModel, batch: int, image_size: int, *, runs: int = 30, warmup: int = 3, budget_s: float = 10.0
) -> float:
    """Median ms of a PyTorch eager forward pass on CPU (at torch's current thread count)."""
    model = _cpu_eval_copy(model)
    x = torch.rand(batch, 3, image_size, image_size)
    with torch.inference_mode():
        return _median_ms(lambda: model(x), runs=runs, warmup=warmup, budget_s=budget_s)


def onnx_latency(
    session: ort.InferenceSession,
    batch: int,
    image_size: int,
    *,
    runs: int = 30,
    warmup: int = 3,
    budget_s: float = 10.0,
) -> float:
    """Median ms of one ``session.run`` on a random batch."""
    feed = {INPUT_NAME: np.random.default_rng(0).random((batch, 3, image_size, image_size), dtype=np.float32)}
    return _median_ms(lambda: session.run([OUTPUT_NAME], feed), runs=runs, warmup=warmup, budget_s=budget_s)


def export_latency_benchmark(
    model: MainModel,
    image_size: int,
    *,
    batches: Sequence[int] = (1, 32),
    threads: int | None = None,
    runs: int = 30,
    budget_s: float = 10.0,
) -> dict[str, Any]:
    """PyTorch eager vs ONNX Runtime (CPU provider, graph optimisation ORT_ENABLE_ALL), same thread count for both.

    ``threads`` defaults to torch's current intra-op thread count. Per batch size: median ms of each and their
    ratio; the goal is ONNX <= 0.7 x eager.
    """
    threads = threads or torch.get_num_threads()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = export_onnx(model, Path(tmp) / "model.onnx", image_size=image_size)
            session = make_session(path, providers=["CPUExecutionProvider"], intra_op_threads=threads)
            rows = []
            for batch in batches:
                eager = torch_latency(model, batch, image_size, runs=runs, budget_s=budget_s)
                onnx_ms = onnx_latency(session, batch, image_size, runs=runs, budget_s=budget_s)
                rows.append({"batch": batch, "torch_eager_ms": eager, "onnx_ms": onnx_ms, "ratio": onnx_ms / eager})
    finally:
        torch.set_num_threads(previous_threads)
    return {
        "image_size": image_size,
        "threads": threads,
        "opset": OPSET,
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "goal_ratio": LATENCY_GOAL,
        "meets_goal": all(row["ratio"] <= LATENCY_GOAL for row in rows),
        "results": rows,
    }
