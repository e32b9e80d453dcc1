"""Serving the promoted model over the open inference protocol on ONNX Runtime (no torch), following the model
registry; see docs/serving.md."""
