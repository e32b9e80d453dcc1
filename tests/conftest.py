"""What every test shares: a cache folder of its own (range tests, judge decisions), so no test reads what another
machine's runs left in ~/.cache/mavias, and the offline text encoder and judge, loaded once."""

import os
import tempfile

import pytest

from mavias.core.encode import SentenceTransformerEncoder
from mavias.core.judging.offline import OfflineJudge


def pytest_configure(config: pytest.Config) -> None:
    # one folder per test session, inherited by the processes the tests start (CLI, Airflow tasks, training ranks)
    os.environ.setdefault("MAVIAS_CACHE_DIR", tempfile.mkdtemp(prefix="mavias-test-cache-"))


@pytest.fixture(scope="session")
def minilm_encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder()


@pytest.fixture(scope="session")
def offline_judge(minilm_encoder) -> OfflineJudge:
    return OfflineJudge(encoder=minilm_encoder)
