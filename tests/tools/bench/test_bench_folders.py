"""`mavias bench folders`: B' pooled over the folders against the planted colours, and its floors."""

import math

from mavias.tools.bench.folders import summary


def _run(hits: int, found: int, wall: float, cross_fitted: bool = False) -> dict:
    recall = hits / 3
    return {"recovery": {"precision": hits / found if found else math.nan, "recall": recall, "n_found": found,
                         "n_true": 3}, "wall_seconds": wall, "cross_fitted": cross_fitted}


def test_precision_and_recall_are_pooled_over_every_folder_and_each_floor_is_judged():
    runs = {0: _run(3, 3, 130.0), 1: _run(2, 2, 200.0, cross_fitted=True), 2: _run(3, 4, 90.0)}
    result = summary(runs)
    assert result["recall"] == 8 / 9 and result["precision"] == 8 / 9
    assert result["cross_fitted"] == 1 and result["max_wall_seconds"] == 200.0 and result["false_found"] == 1
    assert result["met"] == {"recall >= 0.9 (pooled)": False, "precision >= 0.8 (pooled)": True,
                             "every audit <= 4 min": True}
    assert summary({0: _run(0, 0, 300.0)})["met"]["every audit <= 4 min"] is False


def test_folders_without_a_planted_shortcut_count_every_pair_found_as_false():
    null = {"recovery": {"precision": 0.0, "recall": math.nan, "n_found": 1, "n_true": 0}, "wall_seconds": 80.0,
            "cross_fitted": False}
    result = summary({0: null, 1: null | {"recovery": {**null["recovery"], "n_found": 0}}})
    assert result["false_found"] == 1 and math.isnan(result["recall"])
    assert result["met"] == {"no pair found (nothing planted)": False, "every audit <= 4 min": True}
