"""A relevance judge by kind: ``offline`` (WordNet + MiniLM, no network) or ``llm`` (an OpenAI-compatible endpoint)."""

from __future__ import annotations

import typer

from mavias.judging.base import RelevanceJudge

JUDGE_KINDS = ("offline", "llm")


def make_judge(
    kind: str,
    *,
    base_url: str = "https://api.openai.com/v1",
    model: str = "gpt-4o",
    timeout: float = 120.0,
    max_retries: int = 5,
    system_prompt_in_user: bool = False,
    reasoning: bool = False,
    samples: int = 1,
) -> RelevanceJudge:
    if kind == "offline":
        from mavias.judging.offline import OfflineJudge

        return OfflineJudge()
    if kind == "llm":
        from mavias.judging.llm import LLMJudge

        return LLMJudge(
            base_url,
            model,
            timeout=timeout,
            max_retries=max_retries,
            system_prompt_in_user=system_prompt_in_user,
            reasoning=reasoning,
            samples=samples,
        )
    raise typer.BadParameter(f"unknown judge {kind!r}; use one of {JUDGE_KINDS}")
