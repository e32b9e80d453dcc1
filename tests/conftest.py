"""What every test shares: a cache folder of its own (range tests, judge decisions), so no test reads what another
machine's runs left in ~/.cache/mavias, and the offline text encoder and judge, loaded once."""

import os
import tempfile

import pytest
import torch

from mavias.core.encode import SentenceTransformerEncoder
from mavias.core.judging.offline import OfflineJudge

# The longest test files start first, in this order: with `--no-loadscope-reorder` (the Makefile) pytest-xdist hands
# out files in collection order instead of by their number of tests, which put these few-test, long files last.
LONGEST_FIRST = [
    "tests/airflow/test_nightly_faults.py", "tests/airflow/test_celery_stack.py", "tests/airflow/test_nightly_e2e.py",
    "tests/ops/audit/test_audit.py", "tests/core/tune/test_tune_cli.py", "tests/airflow/test_nightly_llm_judge.py",
    "tests/airflow/test_airflow_stack.py", "tests/tools/bench/test_bench_scale.py",
    "tests/core/train/test_distributed.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def pytest_configure(config: pytest.Config) -> None:
    # one folder per test session (per worker of a parallel one), inherited by the processes the tests start (CLI,
    # Airflow tasks, training ranks)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker or "MAVIAS_CACHE_DIR" not in os.environ:
        os.environ["MAVIAS_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"mavias-test-cache-{worker or 'main'}-")
    if worker:  # the workers share the cores: one thread each, not one per core each
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def minilm_encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder()


@pytest.fixture(scope="session")
def offline_judge(minilm_encoder) -> OfflineJudge:
    return OfflineJudge(encoder=minilm_encoder)
