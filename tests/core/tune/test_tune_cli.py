"""`mavias tune` end to end on a tiny set: two trials, the search killed after the first and resumed."""

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pandas as pd
import pytest
from typer.testing import CliRunner

from mavias.cli import app

runner = CliRunner()
# The search is under test, not discovery: the generator's tags and relevance spare each test a tagger's training.
ORACLE = ["--tags", "oracle", "--relevance", "oracle"]


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _complete_trials(db) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]
        except sqlite3.OperationalError:  # tables not created yet
            return 0


@pytest.mark.slow
def test_tune_two_trials_resumed_after_a_kill(tmp_path):
    data = tmp_path / "shapes"
    _invoke("data", "make", "shape-colours", "--out", str(data), "--n-train", "300", "--n-val", "150",
            "--n-test-per-cell", "1", "--image-size", "16", *ORACLE)
    common = ["--manifest", str(data / "manifest.parquet"), "--relevance", str(data / "relevance.parquet"),
              "--workspace", str(tmp_path / "ws")]
    small = ["--set", "epochs=4", "--set", "image_size=16", "--set", "backbone.width=8", "--set", "batch_size=64"]
    _invoke("train", *common, *small, "--set", "method=erm", "--set", "selection=val_acc", "--out", str(tmp_path / "erm"))
    search = tmp_path / "search"
    command = [sys.executable, "-m", "mavias.cli", "tune", *common, *small, "--reference", str(tmp_path / "erm"),
               "--out", str(search), "--trials", "2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while _complete_trials(search / "study.db") < 1 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    first.kill()
    first.wait(timeout=30)
    assert _complete_trials(search / "study.db") == 1, first.stderr.read().decode()[-2000:]
    assert not (search / "best").exists()

    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    trials = pd.read_csv(search / "trials.csv")
    assert (trials["state"] == "COMPLETE").sum() == 2
    starting = trials.sort_values("number").iloc[0]  # the base settings are tried first
    assert (starting["params_mavias.alpha"], starting["params_mavias.lam"], starting["params_epochs"]) == (0.01, 0.5, 4)
    cut_off = trials[(trials["state"] == "FAIL") & trials["params_mavias.alpha"].notna()]
    for _, failed in cut_off.iterrows():  # the trial the kill cut off was run again with the same settings
        same = trials[(trials["state"] == "COMPLETE") & (trials["params_mavias.alpha"] == failed["params_mavias.alpha"])]
        assert len(same) == 1
    summary = json.loads((search / "best" / "tune.json").read_text())
    assert summary["value"] == trials["value"].max()
    assert summary["start_value"] == starting["value"]  # the starting settings' score, beside the winner's
    assert set(summary["params"]) == {"mavias.alpha", "mavias.lam", "mavias.projection_lr_mult", "optim.lr", "epochs"}
    assert 0 < summary["cost_ratio"] <= 1
    written = {path: path.stat().st_mtime_ns for path in search.rglob("*") if path.is_file()}
    other = runner.invoke(app, [*command[3:], "--set", "mavias.lam=0.3"])  # another search into the same folder
    assert other.exit_code == 2 and "holds a search of other settings or other training data" in other.output
    assert {path: path.stat().st_mtime_ns for path in search.rglob("*") if path.is_file()} == written  # untouched

    out = _invoke("evaluate", "--run", str(search / "best"), *common, "--reference", str(tmp_path / "erm"),
                  "--group-attrs", "attr_bias_aligned", "--out", str(tmp_path / "eval"))
    assert "closed_set" in out
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["checkpoint"].endswith("best_val_robust.pt") and metrics["n_samples"] == 100


def test_a_small_budget_still_gets_guided_trials(tmp_path):
    from mavias.core.tune.search import open_study, startup_trials

    assert [startup_trials(n) for n in (2, 6, 12, 40)] == [2, 3, 6, 10]
    study = open_study(tmp_path, n_startup=startup_trials(6))
    assert study.sampler._n_startup_trials == 3  # TPE models the results from the 4th trial on


def test_a_resumed_search_draws_new_settings(tmp_path):
    from mavias.core.tune.search import open_study

    def draw(study):
        trial = study.ask()
        value = trial.suggest_float("lr", 1e-3, 1.0, log=True)
        study.tell(trial, value)
        return value

    first = open_study(tmp_path / "a", seed=3)
    before = [draw(first) for _ in range(2)]
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    # the search process was stopped and started again: its next draws are new, and the same for the same history
    after = [[draw(open_study(tmp_path / copy, seed=3)) for _ in range(2)] for copy in ("a", "b")]
    assert not set(before) & set(after[0])
    assert after[0] == after[1]


def test_a_slow_starting_trial_is_not_pruned_in_the_first_half_of_its_own_run(tmp_path):
    from mavias.core.tune.search import open_study, progress_step

    study = open_study(tmp_path)
    for _ in range(2):  # two finished trials of 12 epochs that learned fast
        fast = study.ask()
        for step in sorted({progress_step(epoch, 12) for epoch in range(1, 13)}):
            fast.report(0.9, step)
        study.tell(fast, 0.9)
    slow = study.ask()  # a trial of 18 epochs (the number of epochs is searched)
    verdicts, reported = [], set()
    for epoch in range(1, 19):
        if (step := progress_step(epoch, 18)) not in reported:
            reported.add(step)
            slow.report(0.5, step)
        verdicts.append(bool(slow.should_prune()))
    assert verdicts == [False] * 8 + [True] * 10  # stoppable once half of its own run is done: 9 of 18 epochs


@pytest.mark.slow
def test_a_diverging_trial_stops_itself_not_the_search(tmp_path):
    """Every trial of a rate far too high diverges: each is stopped and recorded, and the search ends in one line."""
    data = tmp_path / "shapes"
    _invoke("data", "make", "shape-colours", "--out", str(data), "--n-train", "200", "--n-val", "100",
            "--n-test-per-cell", "1", "--image-size", "16", *ORACLE)
    command = [sys.executable, "-m", "mavias.cli", "tune", "--manifest", str(data / "manifest.parquet"),
               "--relevance", str(data / "relevance.parquet"), "--workspace", str(tmp_path / "ws"),
               "--out", str(tmp_path / "search"), "--trials", "2", "--set", "method=erm", "--set", "epochs=3",
               "--set", "image_size=16", "--set", "backbone.width=8", "--set", "optim.lr=1e6"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "2 diverged" in result.stderr and "lower optim.lr" in result.stderr
    assert "Traceback" not in result.stderr
    assert _complete_trials(tmp_path / "search" / "study.db") == 0


def test_starting_settings_that_failed_are_tried_again_and_marked_as_the_start(tmp_path):
    from optuna.trial import TrialState

    from mavias.core.tune.search import START_ATTR, enqueue_start, open_study

    study = open_study(tmp_path)
    start = {"optim.lr": 0.05, "epochs": 20}
    enqueue_start(study, start)
    enqueue_start(study, start)  # queued already: not twice
    first = study.ask()
    assert first.user_attrs[START_ATTR] and len(study.trials) == 1
    study.tell(first, state=TrialState.FAIL)  # e.g. out of memory
    enqueue_start(study, start)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].user_attrs == {START_ATTR: True}
    assert waiting[0].system_attrs["fixed_params"] == start


def test_a_search_is_known_by_the_contents_of_the_relevance_tags_and_reference_it_reads(tmp_path):
    from mavias.core.train.config import TrainConfig
    from mavias.core.tune.search import search_requests

    manifest = pd.DataFrame({"sample_id": ["a", "b"], "label": ["cat", "dog"], "split": ["train", "val"]})
    relevance, reference = tmp_path / "relevance.csv", tmp_path / "best_val_acc.pt"
    relevance.write_text("class,tag,relevant\ncat,sofa,false\n")
    reference.write_bytes(b"reference one")
    base = TrainConfig(method="mavias")
    first, older = search_requests(base, manifest, [relevance, reference])
    assert search_requests(base, manifest, [relevance, reference]) == (first, older)
    assert search_requests(base, manifest) == (older, older)  # what a version that hashed no inputs stored
    reference.write_bytes(b"reference two")  # another --reference: other validation groups
    other, same_older = search_requests(base, manifest, [relevance, reference])
    assert other != first and same_older == older


def test_a_search_request_reads_as_the_digest_of_its_whole_payload(tmp_path):
    """Folders searched before keep resuming: the request is the digest of the settings, rows and inputs together."""
    from mavias.core.train.config import TrainConfig
    from mavias.core.tune.search import search_requests
    from mavias.utils.disk import sha256_file

    manifest = pd.DataFrame({"sample_id": ["b", "a"], "label": ["dog", "cat"], "split": ["val", "train"]})
    relevance = tmp_path / "relevance.csv"
    relevance.write_text("class,tag,relevant\ncat,sofa,false\n")
    base = TrainConfig(method="mavias")
    rows = [["a", "cat", "train"], ["b", "dog", "val"]]  # sample_id, label, split; by split, then sample_id
    payload = {"config": base.model_dump(mode="json"), "rows": rows, "inputs": [sha256_file(relevance)]}
    expected = hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]
    assert search_requests(base, manifest, [relevance])[0] == expected
