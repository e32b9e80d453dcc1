"""Which of a built-in benchmark's tagger words the audit may call often wrong: only those given often enough."""

from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.ops.audit.report import measured_precision


def test_a_word_the_tagger_gave_to_too_few_images_makes_no_claim():
    per_tag = [
        {"tag": "pink", "support": 100, "precision": 0.38, "recall": 0.54},  # given 142 times
        {"tag": "rare", "support": 4, "precision": 0.5, "recall": 0.5},  # given 4 times: 2 right, 2 wrong
        {"tag": "never", "support": 10, "precision": float("nan"), "recall": 0.0},  # never given
        {"tag": "all-wrong", "support": 10, "precision": 0.0, "recall": 0.0},  # given, never right: count unknown
        {"tag": "edge", "support": MIN_SUPPORT, "precision": 1.0, "recall": 1.0},
    ]
    assert measured_precision(per_tag) == {"pink": 0.38, "edge": 1.0}
