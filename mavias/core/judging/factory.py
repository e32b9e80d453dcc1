"""A relevance judge from its settings: ``offline`` (WordNet + MiniLM, no network) or ``llm`` (an OpenAI-compatible
endpoint; its key comes from the environment, never from settings)."""

from __future__ import annotations

from dataclasses import dataclass

from mavias.core.judging.base import RelevanceJudge
from mavias.errors import UserError

JUDGE_KINDS = ("offline", "llm")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_LLM_MODEL = "gpt-4o"
# What `mavias judge eval --benchmark realworld-blind` measured of the offline judge on 12 real-world classes it was
# not developed on (BENCHMARKS.md, "Offline judge on real-world classes"); an LLM's depends on the model.
OFFLINE_QUALITY = "measured precision 97.9% / recall 76.2% on real-world classes it was not developed on"


@dataclass(frozen=True)
class JudgeSettings:
    kind: str = "offline"
    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_LLM_MODEL
    timeout: float = 120.0  # seconds per LLM request
    max_retries: int = 5  # per batch, on 429 / 5xx / timeouts
    system_prompt_in_user: bool = False  # chat templates that drop the system role
    reasoning: bool = False  # a reasoning model: max_completion_tokens, the default temperature
    samples: int = 1  # answers per batch, majority vote (self-consistency)


def describe_judge(settings: JudgeSettings) -> tuple[str, str | None]:
    """What decided relevance, in words, and its measured quality where it is known."""
    if settings.kind == "offline":
        return "the offline judge (WordNet + MiniLM)", OFFLINE_QUALITY
    return f"the LLM judge {settings.model} at {settings.base_url}", None


def make_judge(settings: JudgeSettings = JudgeSettings()) -> RelevanceJudge:
    if settings.kind == "offline":
        from mavias.core.judging.offline import OfflineJudge

        return OfflineJudge()
    if settings.kind == "llm":
        from mavias.core.judging.llm import LLMJudge

        return LLMJudge(settings.base_url, settings.model, timeout=settings.timeout, max_retries=settings.max_retries,
                        system_prompt_in_user=settings.system_prompt_in_user, reasoning=settings.reasoning,
                        samples=settings.samples)
    raise UserError(f"unknown judge {settings.kind!r}", hint=f"use one of {', '.join(JUDGE_KINDS)}")
