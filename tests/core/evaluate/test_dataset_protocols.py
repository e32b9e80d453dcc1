"""CelebA cell metrics against a hand-computed table, ImageNet-9 BG-gap, and the training-majority aligned values."""

from __future__ import annotations

import pandas as pd
import pytest

from mavias.core.evaluate import celeba_metrics, imagenet9_metrics
from mavias.core.protocol import aligned_values

BLOND, NOT_BLOND = 0, 1


def test_celeba_bias_conflicting_is_the_mean_over_conflicting_cells(predictions):
    # cell (label, male): rows, correct -> accuracy
    #   blond, female   (aligned)      10,  9 -> 0.90
    #   blond, male     (conflicting)   4,  1 -> 0.25
    #   not blond, male (aligned)      10,  8 -> 0.80
    #   not blond, female (conflicting) 20, 12 -> 0.60
    pred = predictions(
        (10, 9, {"label": BLOND, "male": "0"}),
        (4, 1, {"label": BLOND, "male": "1"}),
        (10, 8, {"label": NOT_BLOND, "male": "1"}),
        (20, 12, {"label": NOT_BLOND, "male": "0"}),
    )
    metrics = celeba_metrics(pred, "male", {BLOND: "0", NOT_BLOND: "1"})
    assert metrics["bias_conflicting_accuracy"] == pytest.approx((0.25 + 0.60) / 2)  # pooled rows would give 13/24
    assert metrics["unbiased_accuracy"] == pytest.approx((0.90 + 0.25 + 0.80 + 0.60) / 4)
    assert sorted(metrics["cell_accuracy"].values()) == pytest.approx([0.25, 0.6, 0.8, 0.9])


def test_aligned_value_is_the_training_majority():
    train = pd.DataFrame({"label": ["blond"] * 5 + ["not_blond"] * 5,
                          "attr_male": ["0", "0", "0", "0", "1", "1", "1", "1", "0", "0"]})
    assert aligned_values(train, "attr_male") == {"blond": "0", "not_blond": "1"}


def test_imagenet9_bg_gap():
    accs = {"original": 0.95, "mixed_same": 0.9, "mixed_rand": 0.8, "only_fg": 0.85}
    metrics = imagenet9_metrics(accs)
    assert metrics["bg_gap"] == pytest.approx(0.1)
    assert metrics["variant_accuracy"] == accs
    assert "bg_gap" not in imagenet9_metrics({"original": 0.9})
