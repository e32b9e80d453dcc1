"""What a platform team exposes: the listening address, the bearer token, the model repository extension (real
server processes on 127.0.0.1, tritonclient over HTTP and gRPC)."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from mavias.ops.serve.launch import REPO_ROOT, require_serve_python
from tests.ops.serve.conftest import get, metric, post, v2_body

pytestmark = pytest.mark.slow

TOKEN = "s3cr3t-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def listening_addresses(port: int) -> set[str]:
    """The local addresses listening on ``port`` (/proc/net/tcp and tcp6; IPv4-mapped IPv6 as IPv4)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # LISTEN
                raw = bytes.fromhex(address)
                packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
                ip = ipaddress.ip_address(packed)
                found.add(str(getattr(ip, "ipv4_mapped", None) or ip))
    return found


def test_listens_on_loopback_unless_host_says_otherwise(start_server, versions):
    server = start_server("--model-dir", str(versions["v1"]), "--name", "scenes")
    assert listening_addresses(server.http_port) == {"127.0.0.1"}
    assert listening_addresses(server.grpc_port) == {"127.0.0.1"}
    server = start_server("--model-dir", str(versions["v1"]), "--name", "scenes", "--host", "0.0.0.0")
    assert listening_addresses(server.http_port) == {"0.0.0.0"}
    assert listening_addresses(server.grpc_port) in ({"0.0.0.0"}, {"::"})  # gRPC listens dual-stack


def grpc_infer(server, headers=None) -> np.ndarray:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("image", [1, 3, 16, 16], "FP32")
    tensor.set_data_from_numpy(np.full((1, 3, 16, 16), 0.5, np.float32))
    return client.infer("scenes", [tensor], headers=headers).as_numpy("logits")


def test_bearer_token_guards_every_route_but_liveness_and_readiness(start_server, versions, tmp_path):
    (tmp_path / "token").write_text(TOKEN + "\n")
    server = start_server("--model-dir", str(versions["v1"]), "--name", "scenes", "--auth-token-file",
                          str(tmp_path / "token"))
    for path in ("/", "/v2/health/live", "/v2/health/ready"):
        assert get(server, path)[0] == 200, path
    for path in ("/v2", "/v2/models/scenes", "/v2/models/scenes/ready", "/v1/models", "/metrics", "/openapi.json"):
        status, reply = get(server, path)
        assert status == 401 and "bearer token" in reply["error"], path
        assert get(server, path, {"Authorization": "Bearer wrong"})[0] == 401
        assert get(server, path, AUTH)[0] == 200, path
    assert post(server, "/v2/models/scenes/infer", v2_body())[0] == 401
    assert post(server, "/v2/models/scenes/infer", v2_body(), {"Authorization": TOKEN})[0] == 401
    assert post(server, "/v2/models/scenes/infer", v2_body(), AUTH)[0] == 200
    assert metric(server, 'mavias_serve_requests_total{model="-",outcome="unauthorized"', AUTH) >= 8

    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_live() and client.is_server_ready()
    for call in (lambda: grpc_infer(server), lambda: client.get_model_metadata("scenes"),
                 lambda: client.is_model_ready("scenes"), lambda: grpc_infer(server, {"authorization": "Bearer x"})):
        with pytest.raises(InferenceServerException, match="UNAUTHENTICATED"):
            call()
    assert grpc_infer(server, {"authorization": f"Bearer {TOKEN}"}).shape == (1, 3)


def test_model_repository_extension_is_off_unless_enabled(start_server, versions, tmp_path):
    server = start_server("--model-dir", str(versions["v1"]), "--name", "scenes")
    for action in ("unload", "load"):
        assert post(server, f"/v2/repository/models/scenes/{action}", b"{}")[0] == 404
    with pytest.raises(InferenceServerException, match="UNIMPLEMENTED.*--enable-model-repository"):
        grpcclient.InferenceServerClient(server.grpc_url).unload_model("scenes")
    assert get(server, "/v2/models/scenes/ready")[0] == 200
    assert post(server, "/v2/models/scenes/infer", v2_body())[0] == 200

    (tmp_path / "token").write_text(TOKEN)
    server = start_server("--model-dir", str(versions["v1"]), "--name", "scenes", "--auth-token-file",
                          str(tmp_path / "token"), "--enable-model-repository")
    assert post(server, "/v2/repository/models/scenes/unload", b"{}")[0] == 401
    assert post(server, "/v2/repository/models/scenes/unload", b"{}", AUTH) == (200, {"name": "scenes", "unload": True})
    assert get(server, "/v2/health/ready")[0] == 503
    assert post(server, "/v2/models/scenes/infer", v2_body(), AUTH)[0] == 503
    httpclient.InferenceServerClient(server.http_url).load_model("scenes", headers=AUTH)
    assert get(server, "/v2/health/ready")[0] == 200
    assert post(server, "/v2/models/scenes/infer", v2_body(), AUTH)[0] == 200


@pytest.mark.parametrize(("args", "message"), [
    (["--enable-model-repository"], "--enable-model-repository lets a client unload the model"),
    (["--auth-token-file", "/nonexistent/token"], "--auth-token-file /nonexistent/token: cannot read it"),
    (["--max-batch", "0"], "must be greater than 0"),
])
def test_option_mistakes_end_in_one_line(versions, args, message):
    command = [str(require_serve_python()), "-m", "mavias.ops.serve", "--model-dir", str(versions["v1"]), *args]
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
                            env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
