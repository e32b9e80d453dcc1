"""`mavias bench core` bookkeeping on hand-made runs: one test per selected checkpoint, the floors' arithmetic."""

from pathlib import Path

import pandas as pd

from mavias.bench.core import ORACLE, MethodOutcome, _outcomes, floors, summarise
from mavias.train.trainer import TrainResult


def _run(best: dict) -> TrainResult:
    return TrainResult(Path("run"), pd.DataFrame({"seconds": [1.0]}), best, completed=True)


def test_criteria_that_chose_the_same_epoch_are_tested_once():
    tested = []

    def metrics_of(checkpoint: Path) -> dict:
        tested.append(checkpoint.name)
        return {"wg_acc": 0.5}

    same = _run({"val_robust": {"score": 0.9, "epoch": 7}, "val_acc": {"score": 0.95, "epoch": 7}})
    assert [o.metrics for o in _outcomes("ERM", 0, {}, same, metrics_of)] == [{"wg_acc": 0.5}] * 2
    assert tested == ["best_val_robust.pt"]
    tested.clear()
    apart = _run({"val_robust": {"score": 0.9, "epoch": 7}, "val_acc": {"score": 0.95, "epoch": 9}})
    outcomes = _outcomes("ERM", 0, {}, apart, metrics_of)
    assert tested == ["best_val_robust.pt", "best_val_acc.pt"]
    assert [o.selected_epoch for o in outcomes] == [7, 9]


def test_floors_compare_mavias_with_erm_every_baseline_and_the_oracle():
    def outcome(method: str, criterion: str, wg: float, avg: float) -> MethodOutcome:
        return MethodOutcome(method, 0, criterion, {}, 0.0, {"wg_acc": wg, "avg_acc": avg})

    rows = [outcome(m, c, wg, avg) for c in ("val_robust", "val_acc") for m, wg, avg in
            (("ERM", 0.30, 0.80), ("JTT", 0.35, 0.80), ("LfF", 0.41, 0.79), ("SD", 0.20, 0.80), ("FLAC-B", 0.25, 0.8),
             ("DebiAN", 0.33, 0.81),
             (ORACLE, 0.50, 0.86 if c == "val_acc" else 0.84), ("MAVias", 0.42, 0.83))]
    result = floors(summarise(rows))
    assert result["met"] == {"mavias wg >= erm + 10 points": True,
                             "mavias wg >= every bias-unaware baseline": True,
                             "mavias balanced acc >= oracle - 3 points": True}  # 0.86 - 0.83: the oracle's better criterion
    rows[2] = outcome("LfF", "val_robust", 0.43, 0.79)
    assert not floors(summarise(rows))["met"]["mavias wg >= every bias-unaware baseline"]
