"""A relevance judge from its settings: ``offline`` (WordNet + MiniLM, no network) or ``llm`` (an OpenAI-compatible
endpoint behind the guards of :mod:`mavias.core.judging.guarded`). Where each LLM setting comes from (options,
environment, the Airflow connection) is documented once, in docs/llm-judge.md."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pydantic import SecretStr

from mavias.core.judging.base import RelevanceJudge, shown_url
from mavias.core.judging.guards import RequestBudget
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
    api_key: SecretStr | None = field(default=None, repr=False)  # None: $MAVIAS_LLM_API_KEY or $OPENAI_API_KEY

    @classmethod
    def llm_from_environment(cls) -> JudgeSettings:
        """The LLM judge's endpoint and model from $MAVIAS_LLM_BASE_URL and $MAVIAS_LLM_MODEL (else the defaults)."""
        return cls(kind="llm", base_url=os.environ.get("MAVIAS_LLM_BASE_URL") or DEFAULT_BASE_URL,
                   model=os.environ.get("MAVIAS_LLM_MODEL") or DEFAULT_LLM_MODEL)


def describe_judge(settings: JudgeSettings) -> tuple[str, str | None]:
    """What decided relevance, in words, and its measured quality where it is known."""
    if settings.kind == "offline":
        return "the offline judge (WordNet + MiniLM)", OFFLINE_QUALITY
    return f"the LLM judge {settings.model} at {shown_url(settings.base_url)}", None


def make_judge(
    settings: JudgeSettings = JudgeSettings(), *, budget: RequestBudget | None = None, fall_back: bool = False
) -> RelevanceJudge:
    """The judge ``settings`` name. An LLM judge comes behind the guards, the offline judge deciding the tags it must
    not see and, with ``fall_back``, everything once the LLM fails; ``budget`` bounds its requests and time."""
    from mavias.core.judging.offline import OfflineJudge

    if settings.kind == "offline":
        return OfflineJudge()
    if settings.kind == "llm":
        from mavias.core.judging.guarded import GuardedJudge
        from mavias.core.judging.llm import LLMJudge

        key = settings.api_key.get_secret_value() if settings.api_key else None
        llm = LLMJudge(settings.base_url, settings.model, key, timeout=settings.timeout,
                       max_retries=settings.max_retries, system_prompt_in_user=settings.system_prompt_in_user,
                       reasoning=settings.reasoning, samples=settings.samples, budget=budget)
        return GuardedJudge(llm, OfflineJudge(), fall_back=fall_back)
    raise UserError(f"unknown judge {settings.kind!r}", hint=f"use one of {', '.join(JUDGE_KINDS)}")
