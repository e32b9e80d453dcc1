"""The hand-labelled real-world truth tables load through the CLI's benchmark names and are well-formed."""

import pandas as pd
import pytest

from mavias.cli.judge import BENCHMARKS, load_truth
from mavias.core.judging.quality import TRUTH_DIR

REALWORLD = [name for name in BENCHMARKS if name.startswith("realworld-")]


@pytest.mark.parametrize("name", REALWORLD)
def test_truth_table_is_well_formed(name):
    raw = pd.read_csv(TRUTH_DIR / f"{name}.csv", dtype=str, keep_default_na=False)
    assert not raw.duplicated(["class", "tag"]).any()
    assert (raw["tag"] == raw["tag"].str.strip().str.lower()).all() and (raw["tag"] != "").all()

    truth, dataset = load_truth(None, name)
    assert dataset == name and len(truth) == len(raw)
    assert set(truth["source"]) == {"ground_truth"}
    labels_per_class = truth.groupby("class")["relevant"].agg(set)
    assert all(labels == {True, False} for labels in labels_per_class)


@pytest.mark.parametrize(("name", "class_count"), [("realworld-unseen", 11), ("realworld-blind", 12)])
def test_held_out_classes_are_new(name, class_count):
    """The classes of a held-out table appear in no other table."""
    held_out = set(load_truth(None, name)[0]["class"])
    others = {c for other in REALWORLD if other != name for c in load_truth(None, other)[0]["class"]}
    assert len(held_out) == class_count
    assert not held_out & others
