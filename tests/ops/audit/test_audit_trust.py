"""Which of a built-in benchmark's tagger words the audit may call often wrong: only those given often enough."""

from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.ops.audit.report import benchmark_quality, measured_precision


def test_a_word_the_tagger_gave_to_too_few_images_makes_no_claim():
    per_tag = [
        {"tag": "pink", "support": 100, "precision": 0.38, "recall": 0.54},  # given 142 times
        {"tag": "rare", "support": 4, "precision": 0.5, "recall": 0.5},  # given 4 times: 2 right, 2 wrong
        {"tag": "never", "support": 10, "precision": float("nan"), "recall": 0.0},  # never given
        {"tag": "all-wrong", "support": 10, "precision": 0.0, "recall": 0.0},  # given, never right: count unknown
        {"tag": "edge", "support": MIN_SUPPORT, "precision": 1.0, "recall": 1.0},
    ]
    assert measured_precision(per_tag) == {"pink": 0.38, "edge": 1.0}


KNOWN = {"tags": {"source": "tagger", "mean_f1": 0.75, "per_tag": [{"tag": "pink", "support": 100, "precision": 0.38,
                                                                     "recall": 0.54}]},
         "relevance": {"source": "judge", "leak": 0, "precision": 0.8, "recall": 0.92}}


def test_a_benchmarks_measured_quality_is_claimed_only_for_the_tags_and_judge_the_audit_used():
    tags, precision, judge = benchmark_quality(KNOWN, tags_replaced=False, offline_judge=True, reviewed=False)
    assert tags == "measured mean per-tag F1 0.75 on held-out images" and precision == {"pink": 0.38}
    assert judge == "measured precision 80% / recall 92% on these classes"
    assert benchmark_quality(KNOWN, tags_replaced=True, offline_judge=True, reviewed=False)[:2] == (None, {})
    for other in ({"offline_judge": False, "reviewed": False}, {"offline_judge": True, "reviewed": True}):
        assert benchmark_quality(KNOWN, tags_replaced=False, **other)[2] is None
    for relevance in ({"source": "oracle", "leak": 0}, {"source": "judge", "leak": 1}):
        known = KNOWN | {"relevance": KNOWN["relevance"] | relevance}
        assert benchmark_quality(known, tags_replaced=False, offline_judge=True, reviewed=False)[2] is None
    assert benchmark_quality({}, tags_replaced=False, offline_judge=True, reviewed=False) == (None, {}, None)
