from collections.abc import Iterator

import pytest
from judge_fake_server import FakeLLM, relevant_by

from tests.support.llama import llama_server  # noqa: F401 - a fixture


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A local OpenAI-compatible server; by default it marks tags starting with "w" relevant."""
    server = FakeLLM(default=relevant_by(lambda tag: tag.startswith("w"))).start()
    yield server
    server.stop()
