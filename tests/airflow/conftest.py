"""Fixtures of the Airflow tests: one migrated metadata DB per session, synthetic scenes, deployments."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mavias.ops.nightly.config import DEFAULT_CONFIG_PATH
from mavias.tools.demo.run import DemoData, make_demo_data
from mavias.tools.demo.services import airflow_environment, run_airflow, smtp_server
from tests.airflow.harness import Deployment, make_deployment
from tests.support.llama import llama_server  # noqa: F401 - a fixture
from tests.support.s3server import create_bucket, moto_endpoint  # noqa: F401 - a fixture


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow-home")
    env = airflow_environment(home, DEFAULT_CONFIG_PATH, "http://127.0.0.1:9", 25)
    run_airflow(["db", "migrate"], env, home / "db-migrate.log")
    run_airflow(["pools", "set", "gpu", "1", "GPU workers"], env, home / "pools.log")
    return home


@pytest.fixture(scope="session")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> DemoData:
    """Two partitions of 300 train/val images and an 81-image evaluation set, mildly biased so that a tiny model
    trained for seconds learns something of the shapes."""
    return make_demo_data(tmp_path_factory.mktemp("scenes"), n_train=480, n_val=120, n_test_per_cell=3,
                          bg_align=0.5, coobj_align=0.5)


@contextmanager
def deploy(root: Path, airflow_home: Path, endpoint: str, scenes: DemoData) -> Iterator[Deployment]:
    """A deployment with its own bucket, SMTP server and the evaluation set uploaded."""
    with smtp_server(root / "mail") as port:
        deployment = make_deployment(root, airflow_home, endpoint, create_bucket(endpoint), port)
        deployment.upload("evaluation/v1/", scenes, scenes.evaluation, "evaluation")
        yield deployment
