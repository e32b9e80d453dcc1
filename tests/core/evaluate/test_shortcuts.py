"""Label-free B': every statistic against hand-computed tables, no false alarms, and a near-perfect reference."""

import io
import math
import re

import numpy as np
import pandas as pd
import pytest

from mavias.core.evaluate.shortcuts import (
    Predictions,
    association,
    carries_over,
    find_shortcuts,
    is_associated,
    reliance,
    rests_on_few,
)

CLASSES = ["cat", "dog", "fox"]


def _series(rows: list[list[str]]) -> pd.Series:
    return pd.Series(rows, dtype=object)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    return logits - np.log(np.exp(logits).sum(1, keepdims=True))


def _audit(split, n_train: int, n_val: int) -> pd.DataFrame:
    """B' evidence from a simulated training split and a reference's predictions on a validation split, drawn from
    ``split`` in that order."""
    labels, tags, _ = split(n_train)
    return find_shortcuts(labels, tags, tags, [Predictions("reference", *split(n_val))], CLASSES, min_support=20)


def test_association_counts_odds_ratio_interval_and_exact_p_by_hand():
    labels = np.array([0, 0, 0, 1, 1, 1])
    tags = _series([["red"], ["red"], ["red"], ["red"], [], ["fur"]])
    irrelevant = _series([["red"], ["red"], ["red"], ["red"], [], ["fur"]])
    pairs = association(labels, tags, irrelevant, 2, min_support=1).set_index(["label", "tag"])
    red = pairs.loc[(0, "red")]
    # a=3 carriers in cat, b=0 cats without, c=1 dog with red, d=2 dogs without
    assert (red["support"], red["class_n"], red["others_with_tag"]) == (3, 3, 1)
    assert red["log_odds"] == pytest.approx(math.log(3.5 * 2.5 / (0.5 * 1.5)))
    se = math.sqrt(1 / 3.5 + 1 / 0.5 + 1 / 1.5 + 1 / 2.5)
    assert red["log_odds_ci_low"] == pytest.approx(math.log(3.5 * 2.5 / 0.75) - 1.959964 * se)
    # P(>= 3 of the 4 red-tagged samples among the 3 cats) = C(4,3) C(2,0) / C(6,3) = 4 / 20; BH over 3 pairs
    p_values = {"cat red": 0.2, "dog red": 1.0, "dog fur": 0.5}  # fur: 1 of 1 carriers in dog -> C(1,1)C(5,2)/C(6,3)
    assert pairs.loc[(1, "fur"), "support"] == 1
    ranked = sorted(p_values.values())
    assert red["association_q"] == pytest.approx(min(1.0, ranked[0] * 3 / 1, ranked[1] * 3 / 2))


def test_support_floor_drops_rare_pairs():
    labels = np.array([0, 0, 1, 1])
    tags = _series([["red"], [], ["blue"], ["blue"]])
    pairs = association(labels, tags, tags, 2, min_support=2)
    assert list(zip(pairs["label"], pairs["tag"])) == [(1, "blue")]


def test_reliance_aucs_by_hand_and_a_single_other_class_image_does_not_decide():
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    tags = _series([["red"], ["red"], [], [], ["red"], [], [], []])
    log_p_cat = np.array([-0.1, -0.2, -0.3, -0.05, -2.0, -5.0, -4.0, -6.0])
    log_probs = np.stack([log_p_cat, np.log1p(-np.exp(log_p_cat))], axis=1)
    pairs = pd.DataFrame({"label": [0], "tag": ["red"]})
    row = reliance(pairs, [Predictions("reference", labels, tags, log_probs)]).iloc[0]
    # within cats: with red {-0.1, -0.2} against without {-0.3, -0.05}: 2 of 4 comparisons won -> AUC 0.5
    assert row["within_auc"] == pytest.approx(0.5)
    assert (row["within_n_with"], row["within_n_without"], row["cross_n_with"], row["cross_n_without"]) == (2, 2, 1, 3)
    # cross, dogs centred on their median (-5.0 and -4.0 -> -4.5): the red dog scores +2.5, the others -0.5 / +0.5 / -1.5
    assert row["cross_auc"] == pytest.approx(1.0)
    # exact one-sided Mann-Whitney p-values: within, 4 of the 6 orderings give U >= 2 -> 4/6; cross U=3 of 3 -> 1/4.
    # One image of another class cannot show a shortcut on its own: the within-class part alone decides.
    assert row["reliance_p"] == pytest.approx(4 / 6)
    assert row["score"] == pytest.approx(2 * 0.5 - 1)


def test_three_other_class_images_do_not_decide_alone_when_every_image_of_the_class_carries_the_tag():
    labels = np.array([0] * 6 + [1] * 8)
    tags = _series([["red"]] * 6 + [["red"]] * 3 + [[]] * 5)  # no cat without red: the within part cannot test
    log_p_cat = np.array([-0.1] * 6 + [-0.5, -0.6, -0.7] + [-6.0] * 5)  # the three red dogs pulled hard towards cat
    log_probs = np.stack([log_p_cat, np.log1p(-np.exp(log_p_cat))], axis=1)
    pairs = pd.DataFrame({"label": [0], "tag": ["red"]})
    row = reliance(pairs, [Predictions("reference", labels, tags, log_probs)]).iloc[0]
    assert row["cross_auc"] == pytest.approx(1.0) and row["cross_n_with"] == 3  # measured, and shown
    assert np.isnan(row["reliance_p"]) and not row["decidable"]  # but three images decide nothing
    train_labels = np.repeat([0, 1], 300)
    train_tags = _series([["red"]] * 300 + [["red"]] * 15 + [[]] * 285)
    found = find_shortcuts(train_labels, train_tags, train_tags, [Predictions("reference", labels, tags, log_probs)],
                           ["cat", "dog"], min_support=20)
    red = found[(found["class"] == "cat") & (found["tag"] == "red")].iloc[0]
    assert red["reason"].startswith("cannot decide") and "3 of other classes with it" in red["reason"]


def test_a_shortcut_is_found_when_the_within_class_comparison_is_confounded():
    """"kennel" pulls every image towards dog, but a kennel hides part of the dog, so dogs with a kennel are less
    sure than dogs without: the other classes' images show the reliance the within-class test cannot."""
    rng = np.random.default_rng(3)

    def split(n):
        labels = rng.integers(0, 3, n)
        kennel = np.where(labels == 1, rng.random(n) < 0.75, rng.random(n) < 0.08)
        tags = _series([["kennel"] if k else [] for k in kennel])
        own = 6.0 - 2.5 * (kennel & (labels == 1))  # the kennel hides the dog...
        logits = rng.normal(0, 0.7, (n, 3)) + own[:, None] * np.eye(3)[labels] + 1.5 * np.outer(kennel, [0, 1, 0])
        return labels, tags, _log_softmax(logits)  # ...and pulls towards dog

    found = _audit(split, 3000, 900)
    kennel = found[(found["class"] == "dog") & (found["tag"] == "kennel")].iloc[0]
    assert kennel["within_auc"] < 0.4 and kennel["cross_auc"] >= 0.64 and kennel["cross_n_with"] >= 40
    assert kennel["biased"] and kennel["score"] == pytest.approx(2 * kennel["cross_auc"] - 1)  # the cross part decided


def _independent(seed: int, n: int = 600):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    vocabulary = ["red", "blue", "grass", "sky", "indoor", "night", "wood", "snow"]
    tags = _series([[t for t in vocabulary if rng.random() < 0.3] for _ in range(n)])
    logits = rng.normal(0, 1, (n, 3)) + 4.0 * np.eye(3)[labels]  # a good model of the class, blind to the tags
    log_probs = _log_softmax(logits)
    return labels, tags, log_probs


def test_no_false_alarm_when_tags_are_independent_of_the_class():
    empty = 0
    for seed in range(20):
        labels, tags, _ = _independent(seed)
        val_labels, val_tags, val_log_probs = _independent(1000 + seed, 300)
        found = find_shortcuts(labels, tags, tags, [Predictions("reference", val_labels, val_tags, val_log_probs)],
                           CLASSES, min_support=20)
        empty += int(not found["biased"].any())
    assert empty >= 19  # B' empty in at least 95% of 20 seeds


def test_a_planted_tag_is_found_and_an_associated_tag_the_model_ignores_is_not():
    rng = np.random.default_rng(0)

    def split(n):
        labels = rng.integers(0, 3, n)
        aligned = rng.random(n) < 0.95
        red = np.where(labels == 0, aligned, ~aligned & (rng.random(n) < 0.1))
        # "collar" comes with dogs too, but the model never looks at it
        collar = np.where(labels == 1, rng.random(n) < 0.9, rng.random(n) < 0.05)
        tags = _series([[*(["red"] if r else []), *(["collar"] if c else [])] for r, c in zip(red, collar)])
        logits = rng.normal(0, 0.5, (n, 3)) + 6.0 * np.eye(3)[labels] + 2.5 * np.outer(red, [1, 0, 0])
        return labels, tags, _log_softmax(logits)

    labels, tags, _ = split(2000)
    val_labels, val_tags, val_log_probs = split(600)
    assert (val_log_probs.argmax(1) == val_labels).mean() >= 0.995  # near-perfect on biased validation data
    found = find_shortcuts(labels, tags, tags, [Predictions("reference", val_labels, val_tags, val_log_probs)],
                           CLASSES, min_support=20)
    biased = set(zip(found.loc[found["biased"], "class"], found.loc[found["biased"], "tag"]))
    assert biased == {("cat", "red")}
    collar = found[(found["class"] == "dog") & (found["tag"] == "collar")].iloc[0]
    assert collar["association_q"] <= 0.05 and not collar["biased"]
    assert "does not lean on it" in collar["reason"]


def test_an_associated_tag_the_model_ignores_is_rarely_called_a_shortcut():
    """"collar" is strongly associated with dog (and with cat, more spread out) but the model never looks at it:
    with either part of the reliance test able to decide, B' stays a 5%-level test: at most 2 seeds in 20 (2 of
    these 20 and 2 of 60 seeds call it one, through the cross part's chance pull of 0.60 on about 70 images)."""
    found_any = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)

        def split(n):
            labels = rng.integers(0, 3, n)
            collar = rng.random(n) < np.select([labels == 1, labels == 0], [0.9, 0.3], 0.02)
            tags = _series([["collar"] if c else [] for c in collar])
            logits = rng.normal(0, 1.0, (n, 3)) + rng.normal(4.0, 1.0, (n, 1)) * np.eye(3)[labels]
            return labels, tags, _log_softmax(logits)

        found = _audit(split, 2000, 600)
        assert is_associated(found[found["class"] == "dog"]).all()  # the test reaches the reliance step
        found_any += int(found["biased"].any())
    assert found_any <= 2


def test_a_tag_only_twice_as_common_in_a_class_is_not_a_shortcut_even_when_the_model_leans_on_it():
    rng = np.random.default_rng(1)

    def split(n):
        labels = rng.integers(0, 3, n)
        brown = rng.random(n) < np.where(labels == 2, 0.3, 0.15)  # twice as common among foxes: odds ratio 2.4
        tags = _series([["brown"] if b else [] for b in brown])
        logits = rng.normal(0, 0.5, (n, 3)) + 6.0 * np.eye(3)[labels] + 1.5 * np.outer(brown, [0, 0, 1])
        return labels, tags, _log_softmax(logits)

    found = _audit(split, 4000, 1500)
    brown = found[(found["class"] == "fox") & (found["tag"] == "brown")].iloc[0]
    assert brown["association_q"] <= 0.05 and brown["log_odds_ci_low"] > 0  # a real, significant enrichment
    assert not found["biased"].any()
    assert "weakly" in brown["reason"]


def test_a_tag_relied_on_only_within_its_class_stays_and_asks_for_a_look_at_its_relevance():
    """"rim" goes with clear pictures of cats (the tagger sees it when the object is plain): within the class the
    model is surer where it is tagged, but other classes' images tagged "rim" are not pulled towards cat. Only the
    relevance decision tells such a part from a co-object used beside the object, so it stays in B' and says so.
    "red" raises cat wherever it appears."""
    rng = np.random.default_rng(2)

    def split(n):
        labels = rng.integers(0, 3, n)
        aligned = rng.random(n) < 0.9
        red = np.where(labels == 0, aligned, ~aligned & (rng.random(n) < 0.1))
        clarity = rng.normal(0, 1, n)
        rim = np.where(labels == 0, clarity > -0.5, rng.random(n) < 0.15)  # tagged on clear cats, and elsewhere
        tags = _series([[*(["red"] if r else []), *(["rim"] if m else [])] for r, m in zip(red, rim)])
        own = 6.0 + 1.5 * clarity * (labels == 0)
        logits = rng.normal(0, 0.5, (n, 3)) + own[:, None] * np.eye(3)[labels] + 2.5 * np.outer(red, [1, 0, 0])
        return labels, tags, _log_softmax(logits)

    found = _audit(split, 3000, 900)
    biased = set(zip(found.loc[found["biased"], "class"], found.loc[found["biased"], "tag"]))
    assert biased == {("cat", "red"), ("cat", "rim")}
    rim, red = (found[(found["class"] == "cat") & (found["tag"] == tag)].iloc[0] for tag in ("rim", "red"))
    assert rim["within_auc"] > 0.7 and rim["reliance_q"] <= 0.05 and rim["cross_n_with"] >= 10  # relied on, within
    assert rim["cross_auc"] < 0.64 and "within the class only" in rim["reason"]
    assert rim["reason"].endswith("check its relevance decision")
    bound = float(re.search(r"at most (\d\.\d+)", rim["reason"]).group(1))
    assert bound < 0.64 and rim["cross_n_with"] >= 50  # enough images of other classes to show the pull is small
    assert "within the class only" not in red["reason"] and list(carries_over(found[found["biased"]])) == [
        tag == "red" for tag in found.loc[found["biased"], "tag"]]


def test_a_shortcut_is_not_called_within_the_class_only_when_the_few_other_class_images_cannot_tell():
    """A stray tagger puts "blue" on a few images at random: of the 15 or so other-class images tagged "blue" most
    carry no blue, so their pull towards fox is diluted (cross AUC under 0.64), too few to show it is small."""
    rng = np.random.default_rng(4)

    def split(n):
        labels = rng.integers(0, 3, n)
        blue = np.where(labels == 2, rng.random(n) < 0.9, rng.random(n) < 0.002)
        stray = rng.random(n) < 0.02
        tags = _series([["blue"] if b or s else [] for b, s in zip(blue, stray)])
        logits = rng.normal(0, 0.5, (n, 3)) + 6.0 * np.eye(3)[labels] + 2.0 * np.outer(blue, [0, 0, 1])
        return labels, tags, _log_softmax(logits)

    found = _audit(split, 3000, 900)
    blue = found[(found["class"] == "fox") & (found["tag"] == "blue")].iloc[0]
    assert 10 <= blue["cross_n_with"] <= 25 and blue["cross_auc"] < 0.64, blue.to_dict()
    assert blue["biased"] and blue["reliance_q"] <= 0.05, blue.to_dict()
    assert carries_over(found.loc[[blue.name]]).all() and "within the class only" not in blue["reason"]


def _small_validation(seed: int, n: int, lean: float):
    """A 95% 'red' shortcut of cat and a model that leans on it by ``lean`` logits."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    red = np.where(labels == 0, rng.random(n) < 0.95, rng.random(n) < 0.03)
    tags = _series([["red"] if r else [] for r in red])
    logits = rng.normal(0, 0.5, (n, 3)) + 6.0 * np.eye(3)[labels] + lean * np.outer(red, [1, 0, 0])
    return labels, tags, _log_softmax(logits)


def test_a_pair_too_few_images_can_test_is_undecided_until_more_predictions_decide_it():
    """60 validation images leave about 19 red cats against 1 without: not "not relied on", but undecided; the
    out-of-fold predictions on 900 training images decide it."""
    labels, tags, _ = _small_validation(0, 900, 1.0)
    small = Predictions("reference", *_small_validation(1, 60, 1.0))
    found = find_shortcuts(labels, tags, tags, [small], CLASSES, min_support=20)
    red = found[(found["class"] == "cat") & (found["tag"] == "red")].iloc[0]
    assert min(red["within_n_with"], red["within_n_without"]) < 10 and red["cross_n_with"] < 10
    assert not red["decidable"] and not red["biased"] and red["reason"].startswith("cannot decide")
    folds = Predictions("cross-fitted", *_small_validation(0, 900, 1.0))
    found = find_shortcuts(labels, tags, tags, [small, folds], CLASSES, min_support=20)
    red = found[(found["class"] == "cat") & (found["tag"] == "red")].iloc[0]
    assert red["biased"] and red["decidable"] and red["model"] == "cross-fitted"
    alone = reliance(pd.DataFrame({"label": [0], "tag": ["red"]}), [folds]).iloc[0]
    assert red["reliance_p"] == alone["reliance_p"]  # the thin set neither competes nor doubles the p-value
    blind = Predictions("cross-fitted", *_small_validation(0, 900, 0.0))  # enough images, and no reliance
    found = find_shortcuts(labels, tags, tags, [small, blind], CLASSES, min_support=20)
    red = found[(found["class"] == "cat") & (found["tag"] == "red")].iloc[0]
    assert red["decidable"] and not red["biased"] and "does not lean on it" in red["reason"]


def test_a_shortcut_shown_on_a_few_images_alone_rests_on_few_until_more_predictions_decide_it():
    """23 red cats against 2 without, and 0 other-class images with red: significant, and too few to decide."""
    labels, tags, _ = _small_validation(0, 900, 1.0)
    small = Predictions("reference", *_small_validation(3, 60, 3.0))
    found = find_shortcuts(labels, tags, tags, [small], CLASSES, min_support=20)
    red = (found["class"] == "cat") & (found["tag"] == "red")
    assert found.loc[red, "biased"].item() and found.loc[red, "within_n_without"].item() < 10
    assert rests_on_few(found).tolist() == red.tolist()
    assert rests_on_few(pd.read_csv(io.StringIO(found.to_csv(index=False)))).tolist() == red.tolist()  # as read back
    folds = Predictions("cross-fitted", *_small_validation(0, 900, 1.0))
    found = find_shortcuts(labels, tags, tags, [small, folds], CLASSES, min_support=20)
    red = (found["class"] == "cat") & (found["tag"] == "red")
    assert found.loc[red, "model"].item() == "cross-fitted" and not rests_on_few(found).any()


def test_a_pair_no_image_can_test_has_no_p_value_and_says_so():
    labels, tags, _ = _small_validation(0, 900, 1.0)
    val_labels, _, val_log_probs = _small_validation(1, 60, 1.0)
    untagged = Predictions("reference", val_labels, _series([[] for _ in val_labels]), val_log_probs)
    found = find_shortcuts(labels, tags, tags, [untagged], CLASSES, min_support=20)
    red = found[(found["class"] == "cat") & (found["tag"] == "red")].iloc[0]
    assert np.isnan(red["reliance_p"]) and np.isnan(red["reliance_q"]) and not red["decidable"]
    assert red["reason"].startswith("no validation sample to measure")


def test_tags_given_as_sets_are_carried_like_lists():
    """Sets (as the open-set tables hold them) are tags too, not 'no tags', in presence and in the pair counts."""
    from mavias.core.evaluate.shortcuts import pair_counts, tag_presence

    tags = pd.Series([{"water", "sky"}, ["sky"], frozenset({"sky"}), None])
    assert sorted(map(tuple, tag_presence(tags).to_numpy())) == [(0, "sky"), (0, "water"), (1, "sky"), (2, "sky")]
    counts = pair_counts(np.array(["boat", "boat", "car", "car"]), tags)
    assert counts.to_dict("records")[0] == {"label": "boat", "tag": "sky", "n": 2}
