"""Serving the promoted model: kserve's model server on ONNX Runtime (no torch), following the model registry."""
