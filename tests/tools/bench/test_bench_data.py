"""`mavias bench data` runs end to end on a tiny scale (its figures live in BENCHMARKS.md, not in tests)."""

from __future__ import annotations

import json

import pytest

from mavias.tools.bench.data import run_data_bench


@pytest.mark.slow
def test_bench_data_reports_import_and_training_throughput(tmp_path):
    report = run_data_bench(tmp_path / "work", n_files=20, batches=1, batch_size=2, image_size=32, device="cpu",
                            json_path=tmp_path / "data.json")
    assert json.loads((tmp_path / "data.json").read_text()) == json.loads(json.dumps(report))
    assert report["import"]["imagefolder_images_per_s"] > 0 and report["import"]["waterbirds_images_per_s"] > 0
    training = report["training"]
    assert training["erm_images_per_s"] > 0 and training["mavias_over_erm"] == pytest.approx(
        training["mavias_images_per_s"] / training["erm_images_per_s"])
