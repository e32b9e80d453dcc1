"""When a night trains from the promoted night's models, for which share of the steps, and when from scratch; what
a night records for the next one."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from mavias.ops.nightly import warm
from mavias.ops.nightly.config import NightlyConfig
from mavias.storage.s3 import S3Settings

CLASSES = ["bird", "boat", "car"]


def _config(root: Path, **train) -> NightlyConfig:
    return NightlyConfig(model_name="m", s3=S3Settings(bucket="never-reached"), workspace=root,
                         train={"warm_start": True, **train})


def _ids(n: int, start: int = 0) -> pd.Series:
    return pd.Series([f"img-{i}" for i in range(start, start + n)])


def _night(root: Path, night: str, ids: pd.Series, mode: str = "cold") -> tuple[dict, dict, dict]:
    """A trained night's dataset, reference and candidate (their checkpoints and training ids on disk)."""
    run = root / "training" / night
    run.mkdir(parents=True, exist_ok=True)
    for name in ("reference.pt", "candidate.pt", "early.pt"):
        torch.save({"model": {}, "classes": CLASSES, "file": name}, run / name)
    warm.write_train_ids(ids, run)
    chain = 0 if mode == "cold" else warm.read_state(_config(root)).promoted.warm_chain + 1
    plan = {"mode": mode, "reason": "", "fraction": 1.0, "from_night": None, "chain": chain}
    reference = {"dir": str(run), "checkpoint": str(run / "reference.pt"), "best": {}, "candidate_recipe": "",
                 "classes": CLASSES, "start": plan}
    candidate = {"dir": str(run), "checkpoint": str(run / "candidate.pt"), "best": {}, "method": "mavias",
                 "selection": "val_robust", "tuning": {}}
    return {"night": night, "dir": str(run)}, reference, candidate


def _plan(cfg: NightlyConfig, classes: list[str], ids: pd.Series, *, full_retrain: bool = False) -> dict:
    """The plan with production the last promoted night's model (as the registry says after a promotion)."""
    state = warm.read_state(cfg)
    return warm.plan_start(cfg, classes, ids, full_retrain=full_retrain,
                           production_night=None if state.promoted is None else state.promoted.night)


def _promoted(version: str = "v") -> dict:
    return {"version": version, "promoted": True, "reason": "", "uri": "", "in_production": True}


def _promote(cfg: NightlyConfig, night: str, ids: pd.Series, mode: str = "cold") -> None:
    dataset, reference, candidate = _night(cfg.workspace, night, ids, mode)
    warm.record_outcome(cfg, dataset, reference, candidate, {"passed": True}, _promoted())


def test_a_night_that_adds_images_trains_warm_for_the_new_share_plus_the_replay(tmp_path):
    cfg = _config(tmp_path, warm_replay=0.25)
    _promote(cfg, "n1", _ids(300))
    plan = _plan(cfg, CLASSES, _ids(400), full_retrain=False)
    assert plan["mode"] == "warm" and plan["from_night"] == "n1"
    assert plan["fraction"] == pytest.approx((100 + 0.25 * 300) / 400)
    assert "100 new training images beside 300" in plan["reason"]
    start = warm.warm_start(cfg, plan, "candidate")
    assert start.checkpoint == tmp_path / "warm" / "n1" / "candidate.pt" and start.checkpoint.is_file()
    reference = warm.warm_start(cfg, plan, "reference")
    assert reference.checkpoint.name == "reference.pt"
    assert torch.load(reference.proxy)["file"] == "early.pt"  # the reference's early proxy, kept for warm ones
    assert start.proxy is None


@pytest.mark.parametrize(("change", "reason"), [
    ({"train": {"warm_start": False}}, "warm starts are off"),
    ({"full_retrain": True}, "triggered with full_retrain"),
    ({"classes": ["bird", "boat"]}, "the classes changed since n1"),
    ({"overrides": {"backbone.name": "resnet18"}}, "the training settings changed since n1"),
    ({"ids": _ids(300, start=1)}, "1 of the promoted model's 300 training images are no longer"),
    ({"ids": _ids(300)}, "no new training image"),
])
def test_a_night_trains_from_scratch_and_says_why(tmp_path, change, reason):
    _promote(_config(tmp_path), "n1", _ids(300))
    cfg = _config(tmp_path, **change.get("train", {}), overrides=change.get("overrides", {}))
    plan = _plan(cfg, change.get("classes", CLASSES), change.get("ids", _ids(400)),
                           full_retrain=change.get("full_retrain", False))
    assert plan["mode"] == "cold" and plan["fraction"] == 1.0 and warm.warm_start(cfg, plan, "reference") is None
    assert reason in plan["reason"]


def test_nothing_promoted_yet_or_its_files_gone_trains_from_scratch(tmp_path):
    cfg = _config(tmp_path)
    assert "no model was promoted yet" in _plan(cfg, CLASSES, _ids(10), full_retrain=False)["reason"]
    _promote(cfg, "n1", _ids(300))
    (tmp_path / "warm" / "n1" / "candidate.pt").unlink()
    assert "warm-start files of n1 are missing" in _plan(cfg, CLASSES, _ids(400))[
        "reason"]


def test_every_nth_night_of_a_lineage_trains_from_scratch(tmp_path):
    cfg = _config(tmp_path, full_retrain_every=3)
    _promote(cfg, "n1", _ids(100))  # cold
    _promote(cfg, "n2", _ids(200), mode="warm")
    assert _plan(cfg, CLASSES, _ids(300), full_retrain=False)["mode"] == "warm"
    _promote(cfg, "n3", _ids(300), mode="warm")
    assert warm.read_state(cfg).promoted.warm_chain == 2
    plan = _plan(cfg, CLASSES, _ids(400), full_retrain=False)
    assert plan["mode"] == "cold" and "train.full_retrain_every" in plan["reason"]
    _promote(cfg, "n4", _ids(400))  # that cold night starts a new lineage
    assert warm.read_state(cfg).promoted.warm_chain == 0
    assert sorted(p.name for p in (tmp_path / "warm").iterdir() if p.is_dir()) == ["n4"]  # older files pruned


def test_two_failed_candidates_in_a_row_make_the_next_night_train_from_scratch(tmp_path):
    cfg = _config(tmp_path)
    _promote(cfg, "n1", _ids(100))
    for night in ("n2", "n2", "n3"):  # n2 twice: a rerun of a night counts once
        dataset, reference, candidate = _night(tmp_path / night, night, _ids(200))
        warm.record_outcome(cfg, dataset, reference, candidate, {"passed": False}, None)
        if night == "n2":
            assert _plan(cfg, CLASSES, _ids(300), full_retrain=False)["mode"] == "warm"
    assert warm.read_state(cfg).failed_nights == ["n2", "n3"]
    plan = _plan(cfg, CLASSES, _ids(300), full_retrain=False)
    assert plan["mode"] == "cold" and "the candidates of the last 2 nights failed their gates" in plan["reason"]
    _promote(cfg, "n4", _ids(300))
    assert warm.read_state(cfg).failed_nights == []


def test_a_rerun_after_its_promotion_records_the_same_and_an_untrained_night_nothing(tmp_path):
    cfg = _config(tmp_path)
    _promote(cfg, "n1", _ids(100))
    dataset, reference, candidate = _night(tmp_path, "n2", _ids(200), mode="warm")
    rerun = {**_promoted(), "promoted": False, "reason": "v was already in production (rerun)"}
    for outcome in (_promoted(), rerun, rerun):  # the night, then its record_processed retried twice
        warm.record_outcome(cfg, dataset, reference, candidate, {"passed": True}, outcome)
    assert warm.read_state(cfg).promoted.night == "n2" and warm.read_state(cfg).promoted.warm_chain == 1
    lost_race = {"version": "v", "promoted": False, "reason": "production changed", "uri": ""}
    dataset2, reference2, candidate2 = _night(tmp_path / "x", "n2", _ids(200))
    warm.record_outcome(cfg, dataset2, reference2, candidate2, {"passed": True}, lost_race)
    assert warm.record_outcome(cfg, dataset2, None, None, None, None) == {"warm_start": "nothing trained"}
    assert warm.read_state(cfg).promoted.night == "n2"


def test_a_rollback_makes_the_next_night_train_from_scratch(tmp_path):
    cfg = _config(tmp_path)
    _promote(cfg, "n1", _ids(100))
    _promote(cfg, "n2", _ids(200), mode="warm")
    plan = warm.plan_start(cfg, CLASSES, _ids(300), production_night="n1", full_retrain=False)  # rolled back to n1
    assert plan["mode"] == "cold" and "is not the model promoted on n2" in plan["reason"]


def test_a_candidate_that_passes_its_gates_ends_the_run_of_failures(tmp_path):
    cfg = _config(tmp_path)
    _promote(cfg, "n1", _ids(100))
    dataset, reference, candidate = _night(tmp_path / "f", "n2", _ids(200))
    warm.record_outcome(cfg, dataset, reference, candidate, {"passed": False}, None)
    skipped = _night(tmp_path / "s", "n3", _ids(200))  # passed, promotion skipped on request
    warm.record_outcome(cfg, *skipped, {"passed": True}, None)
    assert warm.read_state(cfg).failed_nights == []


def test_the_first_plan_of_a_night_is_the_plan_of_its_retries(tmp_path):
    cfg = _config(tmp_path)
    _promote(cfg, "n1", _ids(100))
    dataset = {"night": "n2", "dir": str(tmp_path / "training" / "d2")}
    Path(dataset["dir"]).mkdir(parents=True)
    first = warm.night_plan(cfg, dataset, CLASSES, _ids(200), production_night="n1", full_retrain=False)
    _promote(cfg, "n2", _ids(200), mode="warm")  # recorded before a retry of the night
    again = warm.night_plan(cfg, dataset, CLASSES, _ids(200), production_night="n2", full_retrain=False)
    assert first == again and first["mode"] == "warm" and first["from_night"] == "n1"
