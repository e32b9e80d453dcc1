"""ONNX export of the served model: backbone + head, never the projection g; its input/output description.

Exporter: the TorchScript-based ``torch.onnx.export(..., dynamo=False)`` with ``dynamic_axes``. The dynamo exporter
(torch's default since 2.9) needs ``onnxscript``, which the pipeline does not depend on; the TorchScript path works
offline for every backbone we ship (plain convolutions, batch norm, pooling, linear) and folds batch norm into the
convolutions in eval mode.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from mavias.core.train.model import MainModel
from mavias.utils.atomic import atomic_path

OPSET = 17
INPUT_NAME, OUTPUT_NAME, BATCH_AXIS = "image", "logits", "batch"


class ExportError(RuntimeError):
    pass


def cpu_eval_copy(model: MainModel) -> MainModel:
    """A float32 CPU copy in eval mode (the graph's input and the served model are float32), so neither the caller's
    device, dtype nor its train/eval mode changes."""
    return copy.deepcopy(model).cpu().float().eval()


def require_image_model(model: object) -> MainModel:
    if not isinstance(model, MainModel):
        raise ExportError(
            f"only the main model (backbone + head) is served; got {type(model).__name__}. Export the MainModel from "
            "mavias.core.train.checkpoints.load_main_model, never a module holding the projection layer"
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
    model = cpu_eval_copy(require_image_model(model))
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
