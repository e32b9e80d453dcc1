"""`mavias bench scale` measures a real night per data size: every step timed in its own process, the work done
counted, the workspace's disk after it (a tiny partition: about a minute and a half on two cores)."""

from __future__ import annotations

import pytest

from mavias.tools.bench.scale import STEPS, plot, run_night
from tests.support.s3server import moto_endpoint  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow


def test_one_night_is_measured_step_by_step(tmp_path, moto_endpoint: str) -> None:  # noqa: F811
    run = run_night(tmp_path, moto_endpoint, scale=1, base=40)
    assert run.images == 50 and set(run.steps) == set(STEPS)
    for step, measured in run.steps.items():
        assert measured["seconds"] > 0 and measured["peak_mib"] > 100, step  # a task process holds torch
    assert run.work["images trained on"] == 50
    assert run.work["images tagged"] == 50 + 27 * 2  # the partition and the evaluation set, each image once
    assert 0 < run.work["tag sets encoded"] <= run.work["images tagged"]
    assert {"partitions", "evaluation", "decoded", "discovery", "training", "nights"} <= set(run.disk)
    assert run.disk["total"] >= sum(size for folder, size in run.disk.items() if folder != "total")
    workspace = tmp_path / "x1" / "workspace"
    assert run.disk["total"] == sum(path.stat().st_size for path in workspace.rglob("*") if path.is_file())
    prepared = next(workspace.glob("training/*/prepared-data.pt")).stat().st_size
    assert prepared < run.disk["decoded"]  # the dataset holds no image: they are in decoded/, once
    plot([run], tmp_path / "scale.png")
    assert (tmp_path / "scale.png").stat().st_size > 10_000
