from rich.console import Console

from mavias.core.encode import factory as encode_factory
from mavias.core.judging import factory as judging_factory
from mavias.core.synthetic import SyntheticScenesConfig
from mavias.tools.bench.discovery import run_discovery_bench


def test_discovery_bench_reports_throughput_requests_and_judge_quality(offline_judge, minilm_encoder, tmp_path, monkeypatch):
    monkeypatch.setattr(judging_factory, "make_judge", lambda kind, **_: offline_judge)
    monkeypatch.setattr(encode_factory, "make_encoder", lambda kind, **_: minilm_encoder)
    console = Console(record=True, width=160)

    report = run_discovery_bench(
        tmp_path,
        model="ViT-S-32",
        tag_images=2,
        batch_size=2,
        device="cpu",
        scenes_cfg=SyntheticScenesConfig(n_train=30, n_val=3, n_test_per_cell=1, image_size=32),
        json_path=tmp_path / "report.json",
        console=console,
    )

    assert report["tagger"]["images"] == 2 and report["tagger"]["images_per_second"] > 0
    assert report["tagger"]["weights"] == "random-init-seed0"
    encoding = report["encoding"]
    assert encoding["samples"] == 30 and 0 < encoding["distinct_prompts"] <= 30
    assert report["judging"]["requests_per_class"] == {"bird": 1, "boat": 1, "car": 1}
    assert report["judging"]["requests_on_rerun"] == 0
    assert 0 <= report["judging"]["quality"]["all (micro)"]["precision"] <= 1
    assert "images/s" in console.export_text() and (tmp_path / "report.json").exists()
