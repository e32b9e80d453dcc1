"""One real round trip against a freshly started server, and the commands a user would type to do the same."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from rich.console import Console

from mavias.ops.serve.launch import running_server, serve_python


def round_trip(version_dir: Path, name: str, image: Path, log_path: Path) -> dict:
    """Start the server on ``version_dir``, send ``image`` (encoded, over gRPC), stop it; the answer."""
    import tritonclient.grpc as grpcclient

    with running_server(["--model-dir", str(version_dir), "--name", name], log_path) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = grpcclient.InferInput("image", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([image.read_bytes()], dtype=np.object_))
        result = client.infer(name, [tensor])
        return {"version": result.get_response().model_version, "label": result.as_numpy("label")[0].decode(),
                "logits": [round(float(v), 3) for v in result.as_numpy("logits")[0]]}


def usage_lines(version_dir: Path, name: str, image: Path) -> list[str]:
    card = json.loads((version_dir / "model_card.json").read_text())
    side = card["input"]["shape"][-1]
    return [
        f"mavias serve --model-dir {version_dir} --name {name}    # or --registry s3://BUCKET/models --name {name}",
        f"curl -s localhost:8080/v2/models/{name}/ready",
        f"curl -s localhost:8080/v1/models/{name}:predict -H 'Content-Type: application/json' "
        f"-d '{{\"instances\": [{{\"b64\": \"'$(base64 -w0 {image})'\"}}]}}'",
        "python -c \"import numpy as np, tritonclient.grpc as g; c = g.InferenceServerClient('localhost:8081'); "
        f"x = g.InferInput('image', [1, 3, {side}, {side}], 'FP32'); "
        f"x.set_data_from_numpy(np.random.rand(1, 3, {side}, {side}).astype('float32')); "
        f"print(c.infer('{name}', [x]).as_numpy('label'))\"",
    ]


def show_round_trip(version_dir: Path | None, name: str, image: Path | None, log_path: Path, console: Console) -> None:
    """The demo's last step: serve the promoted model for a moment; skipped with a message when it cannot run."""
    console.print("\n[bold]Serving the promoted model[/bold]")
    if version_dir is None or image is None:
        console.print("  skipped: no model was promoted")
        return
    if serve_python() is None:
        console.print("  skipped: no serving environment; build it with `make serve-venv`, then run the lines below")
    else:
        answer = round_trip(version_dir, name, image, log_path)
        console.print(f"  {image.name} -> {answer['label']} (version {answer['version']}, logits {answer['logits']})")
    for line in usage_lines(version_dir, name, image):
        console.print(f"  $ {line}", soft_wrap=True, highlight=False, markup=False)
