"""Why each class has the shortcuts it has in B', or none: one status and one line per class."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mavias.core.evaluate.shortcut_status import class_status

CLASSES = ["car", "bird", "boat", "fish", "house", "plane"]


def _pair(name: str, tag: str, *, q: float = 1e-6, ci_low: float = 1.5, p: float | str = 1e-4, biased: bool = False,
          rank: int = 1) -> dict:
    return {"class": name, "tag": tag, "association_q": q, "log_odds_ci_low": ci_low, "reliance_p": p,
            "biased": biased, "rank": rank}


def test_each_class_gets_the_first_status_that_applies_with_its_reason():
    labels = np.repeat(np.arange(6), 30)  # 30 training images per class
    per_class = {0: ["street"], 1: ["tree"], 2: ["sea"], 5: ["snow"]}  # fish: 'lamp' on 5 images; house: nothing
    irrelevant = pd.Series([["lamp"] if k == 3 and i < 5 else per_class.get(k, [])
                            for k in range(6) for i in range(30)])
    evidence = pd.DataFrame([
        _pair("car", "street", biased=True), _pair("car", "road", biased=True, rank=2),
        _pair("bird", "tree", q=0.4, ci_low=-0.2),  # tested, not associated
        _pair("boat", "sea", p=""),  # associated, no validation sample (a CSV blank)
        _pair("plane", "snow"),  # associated, measured, not biased
    ])
    accuracy = {"car": 0.99, "bird": 0.9, "boat": 0.9, "fish": 0.9, "house": 0.9, "plane": 0.3}
    status = class_status(CLASSES, labels, irrelevant, evidence.astype({"reliance_p": object}), min_support=20,
                          reference_accuracy=accuracy, eval_counts={"car": 10, "bird": 10}).set_index("class")
    assert status.loc["car", "status"] == "shortcuts" and status.loc["car", "shortcuts"] == "street, road"
    assert status.loc["bird", "status"] == "not_associated"
    assert status.loc["boat", "status"] == "no_validation_samples"
    assert status.loc["fish", "status"] == "too_few_samples"
    assert status.loc["fish", "reason"] == ("too few samples: its most frequent irrelevant tag 'lamp' is on 5 training "
                                            "image(s), fewer than the 20 needed")
    assert status.loc["house", "status"] == "no_irrelevant_tags"
    assert status.loc["plane", "status"] == "reference_too_weak" and "30% accurate" in status.loc["plane", "reason"]
    assert status.loc["boat", "n_eval"] == 0 and status.loc["car", "n_eval"] == 10


def test_a_capable_reference_that_does_not_lean_on_an_associated_tag_is_said_so():
    labels = np.repeat(np.arange(3), 30)
    irrelevant = pd.Series([["tree"]] * 90)
    evidence = pd.DataFrame([_pair("car", "tree", p=0.6)])
    status = class_status(CLASSES[:3], labels, irrelevant, evidence, min_support=20,
                          reference_accuracy={"car": 0.95})
    assert status.loc[0, "status"] == "not_relied_on" and "does not lean on its 1 associated tag" in status.loc[0, "reason"]
    assert status["n_eval"].isna().all()  # no evaluation set given


def test_an_associated_tag_too_few_images_can_measure_is_undecided_not_unrelied_on():
    labels = np.repeat(np.arange(3), 30)
    irrelevant = pd.Series([["tree"]] * 90)
    evidence = pd.DataFrame([{**_pair("car", "tree", p=0.1), "decidable": "False"}])  # as read back from CSV
    status = class_status(CLASSES[:3], labels, irrelevant, evidence, min_support=20, reference_accuracy={"car": 0.95})
    assert status.loc[0, "status"] == "cannot_decide"
    assert status.loc[0, "reason"].startswith("cannot decide: 1 associated tag(s) (tree) have too few images")


def test_an_associated_tag_with_images_but_no_p_value_is_undecided_not_unmeasured():
    labels = np.repeat(np.arange(3), 30)
    irrelevant = pd.Series([["tree"]] * 90)
    thin = {**_pair("car", "tree", p=""), "decidable": "False", "within_n_with": "20", "cross_n_with": "3"}
    status = class_status(CLASSES[:3], labels, irrelevant, pd.DataFrame([thin]).astype({"reliance_p": object}),
                          min_support=20, reference_accuracy={"car": 0.95})
    assert status.loc[0, "status"] == "cannot_decide"  # 20 class images all with the tag, 3 of others: too few
