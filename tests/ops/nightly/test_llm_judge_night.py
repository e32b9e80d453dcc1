"""What a night with ``discovery.judge: llm`` keeps of who decided: partitions the offline judge decided in the LLM's
place are discovered again, the LLM's decision wins over the stand-in's, and the report's per-class table."""

import json

import pandas as pd
import pytest

from mavias.core.judging.factory import JudgeSettings
from mavias.core.judging.names import CLASS_NAME_SOURCE
from mavias.core.tagging.shards import samples_digest
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import layout
from mavias.ops.nightly.report_context import decision_sources
from mavias.ops.nightly.tagging_plan import is_discovered
from mavias.storage.s3 import S3Settings

OFFLINE = "offline:wordnet-3.0+minilm"


def config(tmp_path, judge: str) -> NightlyConfig:
    return NightlyConfig(model_name="m", s3=S3Settings(bucket="b"), workspace=tmp_path / "ws",
                         discovery={"judge": judge})


def manifest(tmp_path, *sample_ids: str, label: str = "bird"):
    path = tmp_path / f"{label}-{'-'.join(sample_ids)}" / "manifest.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"sample_id": list(sample_ids), "uri": [f"{s}.png" for s in sample_ids], "label": label,
                  "split": "train"}).to_parquet(path)
    return path


def record(cfg: NightlyConfig, partition: str, decisions: dict, sample_ids=("a", "b")) -> None:
    folder = layout(cfg).discovery.partition(partition)
    folder.mkdir(parents=True, exist_ok=True)
    samples = pd.DataFrame({"sample_id": list(sample_ids), "label": "bird"})
    (folder / "discovery.json").write_text(json.dumps({"samples": samples_digest(samples),
                                                       "counts": {"decisions_per_class": decisions}}))


@pytest.mark.parametrize(("judge", "stood_in", "discovered"), [
    ("llm", {"bird": {"judge": 3, "fallback": 2}}, False), ("llm", {"bird": {"judge": 3, "withheld": 4}}, True),
    ("offline", {"bird": {"fallback": 2}}, True),
])  # fmt: skip
def test_a_partition_the_offline_judge_stood_in_for_is_discovered_again(tmp_path, judge, stood_in, discovered):
    cfg = config(tmp_path, judge)
    assert not is_discovered(cfg, "night-1", manifest(tmp_path, "a", "b"))
    record(cfg, "night-1", stood_in)
    assert is_discovered(cfg, "night-1", manifest(tmp_path, "a", "b")) is discovered


def test_a_partition_delivered_again_with_other_images_is_discovered_again(tmp_path):
    cfg = config(tmp_path, "offline")
    record(cfg, "night-1", {"bird": {"judge": 3}}, sample_ids=("a", "b"))
    assert is_discovered(cfg, "night-1", manifest(tmp_path, "b", "a"))  # the same images, in any order
    assert not is_discovered(cfg, "night-1", manifest(tmp_path, "a", "b", "c"))
    assert not is_discovered(cfg, "night-1", manifest(tmp_path, "a", "b", label="boat"))  # labels corrected
    (layout(cfg).discovery.partition("night-1") / "discovery.json").write_text('{"counts": {}}')  # recorded before
    assert not is_discovered(cfg, "night-1", manifest(tmp_path, "a", "b"))  # and no tag shards of them: again
    (layout(cfg).discovery.partition("night-1") / "discovery.json").write_text('{"counts": ')  # cut by a kill
    assert not is_discovered(cfg, "night-1", manifest(tmp_path, "a", "b"))


def test_the_llm_endpoint_comes_from_the_environment_or_the_connection_never_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MAVIAS_LLM_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("MAVIAS_LLM_MODEL", "local-model")
    cfg = config(tmp_path, "llm")
    assert (cfg.judge_settings().base_url, cfg.judge_settings().model) == ("http://127.0.0.1:8080/v1", "local-model")
    other = cfg.with_llm(JudgeSettings(kind="llm", base_url="https://x/v1", model="m2"))
    assert other.judge_settings().model == "m2" and cfg.judge_settings().model == "local-model"
    assert config(tmp_path, "offline").judge_settings().kind == "offline"
    with pytest.raises(ValueError, match="api_key"):
        NightlyConfig(model_name="m", s3=S3Settings(bucket="b"), workspace=tmp_path, discovery={"api_key": "sk-1"})


def test_the_report_counts_who_decided_per_class():
    relevance = pd.DataFrame({
        "class": ["bird"] * 5 + ["boat"] * 2, "tag": ["wing", "sky", "tree", "fog", "birds", "hull", "sea"],
        "relevant": [True, False, False, False, True, True, False],
        "source": ["llm:m", "llm:m", OFFLINE, "review", CLASS_NAME_SOURCE, "llm:m", OFFLINE],
    })  # fmt: skip
    table = decision_sources(relevance, {"bird": {"judge": 1, "cache": 1, "fallback": 1}, "car": {"fallback": 2}})
    rows = table.set_index("class").to_dict(orient="index")
    assert rows["bird"] == {"llm": 2, "offline": 1, "review": 1, "own_name": 1, "tonight_judge": 1,
                            "tonight_cache": 1, "tonight_fallback": 1, "tonight_withheld": 0}
    assert rows["boat"] == {"llm": 1, "offline": 1, "review": 0, "own_name": 0, "tonight_judge": 0,
                            "tonight_cache": 0, "tonight_fallback": 0, "tonight_withheld": 0}
    assert rows["car"]["tonight_fallback"] == 2 and table["class"].tolist() == ["bird", "boat", "car"]


def test_the_llms_decision_wins_over_the_offline_judges_that_stood_in_for_it(tmp_path):
    from mavias.ops.nightly.dataset import _discovered_tables

    cfg = config(tmp_path, "llm")
    ws = layout(cfg).discovery
    decisions = {"night-1": (False, OFFLINE), "night-2": (True, "llm:m")}  # night 1 fell back; night 2 asked the LLM
    for name, (relevant, source) in decisions.items():
        (ws.tags / name).mkdir(parents=True)
        pd.DataFrame({"sample_id": [name], "tag": ["wheel"]}).to_parquet(ws.tags / name / "tags.parquet")
        ws.partition(name).mkdir(parents=True)
        pd.DataFrame({"class": ["car"], "tag": ["wheel"], "relevant": [relevant], "source": [source]}).to_parquet(
            ws.partition(name) / "relevance.parquet")
    _, relevance = _discovered_tables(cfg, ["night-1", "night-2"])
    assert relevance.to_dict(orient="records") == [{"class": "car", "tag": "wheel", "relevant": True,
                                                    "source": "llm:m"}]
    _, offline = _discovered_tables(config(tmp_path, "offline"), ["night-1", "night-2"])
    assert offline["source"].tolist() == [OFFLINE]  # the offline judge's own night: the first partition's

