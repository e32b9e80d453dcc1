"""`mavias bench audit` arithmetic on hand-made checkpoints and recoveries."""

import pytest

from mavias.tools.bench.audit import agreement, audit_floors, reference_epochs


def _point(free: float, closed: float) -> dict:
    return {"label_free_wg": free, "closed_set_wg": closed, "label_free_group": "g", "closed_set_group": "g"}


def test_agreement_is_spearman_and_the_mean_absolute_gap():
    points = {f"c{i}": _point(free, closed) for i, (free, closed) in
              enumerate([(0.1, 0.0), (0.3, 0.2), (0.5, 0.45), (0.2, 0.3), (0.8, 0.9), (0.6, 0.7)])}
    agreed = agreement(points)
    assert agreed["n_checkpoints"] == 6
    assert agreed["spearman"] == pytest.approx(1 - 6 * (0 + 0 + 0 + 1 + 0 + 1) / (6 * 35))  # ranks swap twice
    assert agreed["mean_gap"] == pytest.approx((0.1 + 0.1 + 0.05 + 0.1 + 0.1 + 0.1) / 6)
    assert agreement({"a": _point(0.5, 0.5), "b": _point(0.5, 0.6), "c": _point(0.5, 0.7)})["spearman"] is None


def test_floors_hold_on_every_seed():
    recovery = {s: {"label_free": {"precision": p, "recall": r}} for s, (p, r) in enumerate([(1.0, 1.0), (0.8, 0.9)])}
    good = {"spearman": 0.85, "mean_gap": 0.08}
    assert all(audit_floors(recovery, good)["met"].values())
    recovery[2] = {"label_free": {"precision": 0.7, "recall": 0.8}}
    met = audit_floors(recovery, {"spearman": 0.79, "mean_gap": 0.11})["met"]
    assert not any(met.values())


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_a_seed_that_found_nothing_has_no_precision_whatever_its_place(order):
    """An empty B' (precision undefined) neither hides nor sets the other seeds' lowest precision."""
    seeds = [{"label_free": {"precision": float("nan"), "recall": 0.0}},
             {"label_free": {"precision": 0.85, "recall": 1.0}}]
    floors = audit_floors({s: seeds[i] for s, i in enumerate(order)}, {"spearman": 0.9, "mean_gap": 0.0})
    assert floors["min_precision"] == 0.85 and floors["min_recall"] == 0.0
    assert not floors["met"]["recall >= 0.9 (every seed)"]


def test_a_report_is_strict_json(tmp_path):
    """jq and browsers refuse NaN: an undefined figure is written as null."""
    import json

    from mavias.utils.atomic import write_report

    path = write_report(tmp_path / "r.json", {"precision": float("nan"), "rows": [float("inf"), 0.5], "n": 3})
    assert json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in a report")) == {
        "precision": None, "rows": [None, 0.5], "n": 3}


def test_the_reference_checkpoints_span_its_training(tmp_path):
    assert list(reference_epochs(tmp_path, 33)) == ["ERM epoch 1", "ERM epoch 8", "ERM epoch 16", "ERM epoch 33"]
    assert list(reference_epochs(tmp_path, 2)) == ["ERM epoch 1", "ERM epoch 2"]
