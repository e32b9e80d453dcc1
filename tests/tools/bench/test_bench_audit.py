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


def test_the_reference_checkpoints_span_its_training(tmp_path):
    assert list(reference_epochs(tmp_path, 33)) == ["ERM epoch 1", "ERM epoch 8", "ERM epoch 16", "ERM epoch 33"]
    assert list(reference_epochs(tmp_path, 2)) == ["ERM epoch 1", "ERM epoch 2"]
