"""Does a model card describe its ONNX graph? Classes, input size and normalisation, checked before serving.

A card that disagrees with its graph would make every request fail (or answer wrongly), so such a version is
refused at load. The normalisation check reads the graph itself (``onnx``, no torch): the exporter writes the
model's normalisation as ``Sub(image, mean)`` then ``Div(., std)`` with constant operands.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from mavias.ops.serve.preprocess import Normalisation, Preprocessing


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def graph_normalisation(onnx_path: Path, input_name: str) -> tuple[list[float], list[float]] | None:
    """(mean, std) of a ``Sub(input, mean)`` -> ``Div(., std)`` at the graph's input, else ``None``."""
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    constants = _constants(graph)
    sub = next((n for n in graph.node if n.op_type == "Sub" and list(n.input[:1]) == [input_name]
                and n.input[1] in constants), None)
    if sub is None:
        return None
    div = next((n for n in graph.node if n.op_type == "Div" and list(n.input[:1]) == [sub.output[0]]
                and n.input[1] in constants), None)
    if div is None:
        return None
    return constants[sub.input[1]].reshape(-1).tolist(), constants[div.input[1]].reshape(-1).tolist()


def _normalisation_problems(card: Normalisation, found: tuple[list[float], list[float]] | None) -> list[str]:
    if not card.in_model:
        return [] if found is None else [(
            f"the card says to normalise before the model, but the graph normalises itself (mean {found[0]}, "
            f"std {found[1]}): images would be normalised twice")]
    if found is None:
        return [("the card says the model normalises its input, but the graph does not start with Sub(mean), "
                 "Div(std)")]
    mean, std = found
    if len(mean) != len(card.mean) or not np.allclose(mean, card.mean, atol=1e-6) or \
            len(std) != len(card.std) or not np.allclose(std, card.std, atol=1e-6):
        return [(f"normalisation: the card says mean {card.mean}, std {card.std}; the graph uses mean "
                 f"{[round(v, 6) for v in mean]}, std {[round(v, 6) for v in std]}")]
    return []


def card_disagreements(card: Mapping[str, Any], spec: Preprocessing, onnx_path: Path,
                       session: ort.InferenceSession) -> list[str]:
    """What the card says that the graph contradicts (empty: they agree)."""
    (graph_input,), (graph_output,) = session.get_inputs(), session.get_outputs()
    channels, height, width = graph_input.shape[1:]
    problems = []
    if channels != 3:
        problems.append(f"the graph takes {channels} channels; the card's preprocessing makes RGB (3)")
    if (height, width) != (spec.center_crop, spec.center_crop):
        problems.append(f"the graph takes {height}x{width} images; the card's preprocessing crops "
                        f"{spec.center_crop}x{spec.center_crop}")
    if spec.resize < spec.center_crop:
        problems.append(f"preprocessing resizes to {spec.resize}, smaller than its crop {spec.center_crop}")
    card_shape = list(card.get("input", {}).get("shape", [None])[1:])
    if card_shape != [channels, height, width]:
        problems.append(f"the card's input shape {card_shape} is not the graph's {[channels, height, width]}")
    classes = list(card["classes"])
    if graph_output.shape[-1] != len(classes):
        problems.append(f"the card lists {len(classes)} classes; the graph outputs {graph_output.shape[-1]} logits")
    if len(set(classes)) != len(classes):
        problems.append(f"the card lists a class twice: {classes}")
    return problems + _normalisation_problems(spec.normalisation, graph_normalisation(onnx_path, graph_input.name))
