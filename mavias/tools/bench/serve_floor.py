"""The floor under `mavias serve`'s latency: the thinnest Python gRPC server that can answer a ``ModelInfer`` with the
same ONNX Runtime call (grpc.aio on uvloop, the request's raw contents straight into ``session.run``, the logits
straight back; no checks, no admission, no metrics). Whatever it costs over a bare ``session.run`` no Python server
on this stack can save. It runs in the serving environment, started by :mod:`mavias.tools.bench.serve`:
``python -m mavias.tools.bench.serve_floor VERSION_DIR PORT``; it serves until stopped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import uvloop
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pb_grpc

from mavias.ops.export.session import make_session


class FloorServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, onnx_path: Path):
        self.session = make_session(onnx_path, providers=["CPUExecutionProvider"])
        model_input = self.session.get_inputs()[0]
        self.input_name, self.image_shape = model_input.name, tuple(int(d) for d in model_input.shape[1:])

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        batch = np.frombuffer(request.raw_input_contents[0], "<f4").reshape(-1, *self.image_shape)
        logits = self.session.run(None, {self.input_name: batch})[0]
        output = pb.ModelInferResponse.InferOutputTensor(name="logits", datatype="FP32", shape=logits.shape)
        return pb.ModelInferResponse(model_name=request.model_name, outputs=[output],
                                     raw_output_contents=[logits.tobytes()])


async def serve(version_dir: Path, port: int) -> None:
    card = json.loads((version_dir / "model_card.json").read_text())
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(FloorServicer(version_dir / card["onnx"]["file"]), server)
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise SystemExit(f"cannot listen on 127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve(Path(sys.argv[1]), int(sys.argv[2])))
