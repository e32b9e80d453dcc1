"""The open-set reference as a user meets it: a trained, near-perfect ERM reference still gives the planted shortcut,
any ERM run is a reference, and the wrong run is one readable error."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mavias.core.evaluate.shortcuts import RULE_VERSION
from mavias.core.protocol import BIASED_TAGS_FILE, load_reference, train_reference
from mavias.core.protocol.crossfit import (
    CROSSFIT_DIR,
    FOLDS,
    KEY_FILE,
    LOG_PROBS_FILE,
    cross_fit,
    fold_of,
    needs_cross_fit,
)
from mavias.core.protocol.reference_files import DISCOVERY_FILE, rule_version
from mavias.core.train.config import TrainConfig
from mavias.core.train.data import feature_split
from mavias.core.train.prepare import PreparedData
from mavias.core.train.warm import WarmStart
from mavias.errors import UserError
from tests.support.training import make_trainer

CLASSES = ["cat", "dog", "fox"]


def _split(n: int, seed: int, name: str, relevant: frozenset[str] = frozenset()):
    """x1, x2 separate the classes (almost) perfectly; x3 is a 95% shortcut of "cat" that the tag "red" names;
    ``relevant`` tags are judged relevant to every class."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    centres = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    red = np.where(y == 0, rng.random(n) < 0.95, rng.random(n) < 0.03)
    tags = [({"red"} if r else set()) | ({"grass"} if rng.random() < 0.3 else set()) for r in red]
    frame = pd.DataFrame({"sample_id": [f"{name}{i}" for i in range(n)], "label": np.array(CLASSES)[y],
                          "x1": centres[y, 0] + rng.normal(0, 0.6, n), "x2": centres[y, 1] + rng.normal(0, 0.6, n),
                          "x3": 3.0 * red + rng.normal(0, 0.3, n)})
    frame["sample_tags"] = [sorted(t) for t in tags]
    frame["irrelevant_tags"] = [[t for t in tags if t not in relevant] for tags in frame["sample_tags"]]
    split = feature_split(frame, CLASSES)
    split.embeddings = torch.tensor(frame[["x3"]].to_numpy(), dtype=torch.float32)
    return split


@pytest.fixture(scope="module")
def data():
    return PreparedData(CLASSES, {"train": _split(1500, 0, "t"), "val": _split(600, 1, "v")}, pd.DataFrame())


CFG = TrainConfig.model_validate({"method": "erm", "backbone": {"name": "mlp", "width": 16}, "epochs": 12,
                                  "batch_size": 64, "optim": {"lr": 0.05}})


def test_a_near_perfect_reference_still_gives_the_planted_shortcut(data, tmp_path):
    reference = train_reference(data, CFG, tmp_path / "erm", progress=False)
    assert reference.run.best["val_acc"]["score"] >= 0.995  # near-perfect on validation data biased like training
    assert list(zip(reference.biased_tags["class"], reference.biased_tags["tag"])) == [("cat", "red")]
    assert (tmp_path / "erm" / BIASED_TAGS_FILE).is_file() and (tmp_path / "erm" / "early.pt").is_file()
    assert not (tmp_path / "erm" / CROSSFIT_DIR).exists()  # 600 validation samples decide: no cross-fitting
    assert set(reference.val_groups) <= {f"{c}|{k}" for c in CLASSES for k in ("aligned", "conflicting")}


def test_biased_tags_cached_under_another_rule_are_computed_again(data, tmp_path):
    train_reference(data, CFG, tmp_path / "erm", progress=False)
    key = json.loads((tmp_path / "erm" / DISCOVERY_FILE).read_text())
    assert key["rule_version"] == RULE_VERSION  # the rule that computed them is part of their cache key
    (tmp_path / "erm" / DISCOVERY_FILE).write_text(json.dumps({**key, "rule_version": RULE_VERSION - 1}))
    assert rule_version(tmp_path / "erm") == RULE_VERSION - 1 and rule_version(tmp_path) is None  # as the report reads
    (tmp_path / "erm" / BIASED_TAGS_FILE).write_text("class,tag\n")  # what the older rule found
    reference = load_reference(tmp_path / "erm", data)
    assert list(zip(reference.biased_tags["class"], reference.biased_tags["tag"])) == [("cat", "red")]
    assert json.loads((tmp_path / "erm" / DISCOVERY_FILE).read_text())["rule_version"] == RULE_VERSION


def test_biased_tags_follow_a_changed_relevance_decision_of_the_same_tags(data, tmp_path):
    """A reviewed decision changes which tags are irrelevant, not the tags: B' must not be read from the cache."""
    train_reference(data, CFG, tmp_path / "erm", progress=False)
    reviewed = PreparedData(CLASSES, {"train": _split(1500, 0, "t", frozenset({"red"})),
                                      "val": _split(600, 1, "v", frozenset({"red"}))}, pd.DataFrame())
    assert load_reference(tmp_path / "erm", reviewed).biased_tags.empty  # "red" relevant: no candidate left
    reference = load_reference(tmp_path / "erm", data)
    assert list(zip(reference.biased_tags["class"], reference.biased_tags["tag"])) == [("cat", "red")]


def test_a_warm_reference_keeps_the_early_proxy_of_the_run_it_started_from(data, tmp_path):
    """Its own first epochs start from a trained model, so they are no bias-amplified proxy."""
    cold = train_reference(data, CFG, tmp_path / "cold", progress=False)
    proxy = tmp_path / "cold" / "early.pt"
    start = WarmStart(Path(cold.checkpoint), 0.5, proxy=proxy)
    warm = train_reference(data, CFG, tmp_path / "warm", progress=False, warm=start)
    early = tmp_path / "warm" / "early.pt"
    assert early.read_bytes() == proxy.read_bytes()
    assert list(zip(warm.biased_tags["class"], warm.biased_tags["tag"])) == [("cat", "red")]
    kept = early.stat().st_mtime_ns
    train_reference(data, CFG, tmp_path / "warm", progress=False, warm=start)  # a rerun: the same proxy, untouched
    assert early.stat().st_mtime_ns == kept


def test_a_validation_split_too_small_to_decide_is_helped_by_cross_fitted_references(data, tmp_path):
    """30 validation samples leave about 10 red cats against 0 or 1 without: the reference is cross-fitted on the training
    split, whose out-of-fold predictions decide."""
    small = PreparedData(CLASSES, {"train": data["train"], "val": _split(30, 4, "s")}, pd.DataFrame())
    reference = train_reference(small, CFG, tmp_path / "erm", progress=False)
    assert list(zip(reference.biased_tags["class"], reference.biased_tags["tag"])) == [("cat", "red")]
    assert reference.biased_tags.loc[0, "model"] == "cross-fitted"
    assert all((tmp_path / "erm" / CROSSFIT_DIR / f"fold-{k}" / "best_val_acc.pt").is_file() for k in range(FOLDS))
    cached = load_reference(tmp_path / "erm", small).biased_tags  # read back from the run folder
    assert cached[["class", "tag", "model"]].values.tolist() == [["cat", "red", "cross-fitted"]]
    log_probs = tmp_path / "erm" / CROSSFIT_DIR / LOG_PROBS_FILE
    written = log_probs.stat().st_mtime_ns
    train_reference(small, CFG, tmp_path / "erm", progress=False)  # run again (a resumed audit): nothing retrained
    assert log_probs.stat().st_mtime_ns == written


def test_a_shortcut_shown_on_a_few_validation_images_alone_asks_for_cross_fitting(data, tmp_path):
    counts = {"class": ["cat"], "tag": ["red"], "association_q": [1e-9], "log_odds_ci_low": [3.0], "cross_n_with": [0]}
    thin = pd.DataFrame(counts | {"biased": [True], "decidable": [False], "within_n_with": [23], "within_n_without": [2]})
    assert needs_cross_fit(thin, tmp_path / "erm", data["train"])
    decided = thin.assign(within_n_without=12, decidable=True)
    assert not needs_cross_fit(decided, tmp_path / "erm", data["train"])
    assert needs_cross_fit(decided.assign(biased=False, decidable=False), tmp_path / "erm", data["train"])  # undecided


def test_fold_runs_of_other_samples_are_started_over(data, tmp_path):
    """A run folder reused for other data: its fold runs (trained on samples now held out) are not resumed."""
    stale = tmp_path / "erm" / CROSSFIT_DIR / "fold-0"
    stale.mkdir(parents=True)
    (stale / "last.pt").write_bytes(b"a fold run of other samples")
    (tmp_path / "erm" / CROSSFIT_DIR / KEY_FILE).write_text('{"samples": "other", "folds": "other"}')
    fitted = []

    def fit(fold_data, run_dir):
        fitted.append(len(fold_data["train"]))  # each fold model fits the other half
        assert not (run_dir / "last.pt").exists()  # started over
        return make_trainer(CFG, fold_data["train"], fold_data["val"], CLASSES, run_dir, progress=False).fit()

    cross_fit(data, fit, 0, tmp_path / "erm")
    assert len(fitted) == 2 and sum(fitted) == 1500 and (tmp_path / "erm" / CROSSFIT_DIR / LOG_PROBS_FILE).is_file()


def test_folds_keep_every_class_balanced_and_follow_the_seed():
    labels = np.repeat([0, 1, 2], [101, 40, 7])
    folds = fold_of(labels, seed=0)
    for label in range(3):
        counts = np.bincount(folds[labels == label], minlength=FOLDS)
        assert counts.max() - counts.min() <= 1
    assert np.array_equal(folds, fold_of(labels, seed=0)) and not np.array_equal(folds, fold_of(labels, seed=1))


def test_any_erm_run_is_a_reference_and_other_runs_are_refused(data, tmp_path):
    make_trainer(CFG.model_copy(update={"selection": "val_robust", "epochs": 3}), data["train"], data["val"], CLASSES,
            tmp_path / "plain", progress=False).fit()
    assert not (tmp_path / "plain" / BIASED_TAGS_FILE).exists()
    reference = load_reference(tmp_path / "plain", data)  # B' computed when first needed, then cached
    assert (tmp_path / "plain" / BIASED_TAGS_FILE).is_file()
    assert load_reference(tmp_path / "plain", data).biased_tags.equals(reference.biased_tags)
    mavias = CFG.model_copy(update={"method": "mavias", "epochs": 1})
    make_trainer(mavias, data["train"], data["val"], CLASSES, tmp_path / "mavias", progress=False).fit()
    with pytest.raises(UserError, match="is a mavias run; the reference must be an ERM run"):
        load_reference(tmp_path / "mavias", data)
    with pytest.raises(UserError, match="is not a run folder"):
        load_reference(tmp_path / "nowhere", data)
    other = PreparedData(["cat", "dog"], data.splits, pd.DataFrame())
    with pytest.raises(UserError, match="use a reference trained on this dataset"):
        load_reference(tmp_path / "plain", other)
