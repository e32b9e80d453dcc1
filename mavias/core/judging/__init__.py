"""Relevance judges: (class, tags) -> which tags are intrinsic to the class; every other tag is a potential bias.

The judges themselves live in :mod:`mavias.core.judging.offline` (WordNet + MiniLM, the offline default) and
:mod:`mavias.core.judging.llm` (any OpenAI-compatible endpoint); import them from there, since they load heavier packages.
"""

from mavias.core.judging.base import BATCH_SIZE, JudgeConfigError, JudgeStats, RelevanceJudge, batches
from mavias.core.judging.cache import DecisionCache, decide, decide_all
from mavias.core.judging.quality import Evaluation, Scores, evaluate_relevance, evaluation_table
from mavias.core.judging.review import ReviewedDecisions, apply_review, export_review, load_review

__all__ = [
    "BATCH_SIZE",
    "DecisionCache",
    "Evaluation",
    "JudgeConfigError",
    "JudgeStats",
    "RelevanceJudge",
    "ReviewedDecisions",
    "Scores",
    "apply_review",
    "batches",
    "decide",
    "decide_all",
    "evaluate_relevance",
    "evaluation_table",
    "export_review",
    "load_review",
]
