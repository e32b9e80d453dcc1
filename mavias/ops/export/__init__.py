"""ONNX export of the served model (backbone + head, never the bias projection), as the release and `mavias export`
use it:

- :mod:`mavias.ops.export.exporter`: ``export_onnx`` and ``describe_onnx``;
- :mod:`mavias.ops.export.parity`: ``verify_onnx``, ONNX Runtime against PyTorch on held-out images, its finding a
  ``VerificationResult`` (:mod:`mavias.ops.export.verification`, readable without torch);
- :mod:`mavias.ops.export.latency`: ONNX Runtime against PyTorch eager on the CPU;
- :mod:`mavias.ops.export.version`: the model card of an export, and ``export_checkpoint`` (a run's checkpoint as a
  version folder);
- :mod:`mavias.ops.export.session`: the ONNX Runtime session factory, which the model server uses too.

This file imports nothing: the model server imports :mod:`mavias.ops.export.session` and must not import torch.
"""
