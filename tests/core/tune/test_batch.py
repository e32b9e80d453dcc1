"""Batch search as the nightly DAG runs it: plan (warm start first, idempotent), mapped trials, select."""

import json

import pytest
from optuna.trial import TrialState

from mavias.core.encode import SentenceTransformerEncoder
from mavias.core.protocol import train_reference
from mavias.core.relevance import load_relevance
from mavias.core.synthetic.shapes import ShapesConfig, make_shapes
from mavias.core.train.config import TrainConfig
from mavias.core.train.prepare import prepare_image_data
from mavias.core.tune.batch import finish_batch, plan_batch, run_planned_trial
from mavias.core.tune.search import open_study
from mavias.core.tune.space import current_values, search_space
from mavias.errors import UserError

BASE = TrainConfig.model_validate({"method": "mavias", "epochs": 2, "image_size": 16, "batch_size": 64,
                                   "optim": {"lr": 0.05}, "backbone": {"name": "small_cnn", "width": 8}})


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    manifest = make_shapes(root / "data", ShapesConfig(n_train=200, n_val=100, n_test_per_cell=1, image_size=16))
    data = prepare_image_data(manifest, relevance=load_relevance(root / "data" / "relevance.parquet"),
                              encoder=SentenceTransformerEncoder(), store_dir=root / "emb", image_size=16,
                              progress=False)
    reference = train_reference(data, BASE.model_copy(update={"method": "erm"}), root / "ref", progress=False)
    return data, reference


@pytest.mark.slow
def test_plan_run_select(tmp_path, prepared):
    data, reference = prepared
    warm = current_values(BASE, search_space(BASE)) | {"mavias.lam": 0.6}
    jobs = plan_batch(tmp_path, BASE, 2, batch="night-1", warm_start=warm)
    assert len(jobs) == 2 and jobs[0]["params"] == warm
    assert plan_batch(tmp_path, BASE, 2, batch="night-1", warm_start=warm) == jobs  # a retried planner asks nothing new
    results = [run_planned_trial(data, reference, BASE, tmp_path, job) for job in jobs]
    tuned = finish_batch(tmp_path, results, BASE)
    assert tuned.best_value == max(r["value"] for r in results)
    assert json.loads((tuned.best_dir / "tune.json").read_text())["params"] == tuned.best_params
    assert (tuned.best_dir / f"best_{BASE.selection}.pt").exists()
    assert finish_batch(tmp_path, results, BASE).best_params == tuned.best_params  # idempotent
    next_dataset = plan_batch(tmp_path / "next", BASE, 1, batch="night-2", warm_start=tuned.best_params)
    assert [j["params"] for j in next_dataset] == [tuned.best_params]


def test_a_planner_killed_part_way_asks_only_the_trials_it_left(tmp_path):
    warm = current_values(BASE, search_space(BASE)) | {"mavias.lam": 0.6}
    killed = plan_batch(tmp_path, BASE, 1, batch="night-1", warm_start=warm)  # as if killed after its first trial
    jobs = plan_batch(tmp_path, BASE, 3, batch="night-1", warm_start=warm)  # the retry
    assert len(jobs) == 3 and jobs[0] == killed[0] and jobs[0]["params"] == warm
    assert len({job["number"] for job in jobs}) == 3
    assert plan_batch(tmp_path, BASE, 3, batch="night-1", warm_start=warm) == jobs


def test_a_warm_start_asked_by_a_planner_killed_before_marking_it_is_planned_again(tmp_path):
    warm = current_values(BASE, search_space(BASE)) | {"mavias.lam": 0.6}
    study = open_study(tmp_path, requeue_stale=False)
    study.enqueue_trial(warm)
    orphan = study.ask()  # killed here: asked, not yet marked as the batch's
    jobs = plan_batch(tmp_path, BASE, 2, batch="night-1", warm_start=warm)
    assert len(jobs) == 2 and jobs[0]["params"] == warm and orphan.number not in {job["number"] for job in jobs}
    assert open_study(tmp_path, requeue_stale=False).trials[orphan.number].state == TrialState.FAIL


def test_diverged_trials_are_pruned_and_a_batch_where_all_diverged_says_what_to_do(tmp_path):
    jobs = plan_batch(tmp_path, BASE, 2, batch="night-1")
    results = [{"number": job["number"], "value": None, "diverged": "training diverged in epoch 1 (loss nan)"}
               for job in jobs]
    with pytest.raises(UserError, match="2 diverged"):
        finish_batch(tmp_path, results, BASE)
    states = {t.number: t.state for t in open_study(tmp_path, requeue_stale=False).trials}
    assert [states[job["number"]] for job in jobs] == [TrialState.PRUNED, TrialState.PRUNED]
