"""A judge wrapper that counts the requests (one per judge call) each class costs."""

from __future__ import annotations

from collections import Counter

from mavias.core.judging.base import JudgeStats, RelevanceJudge


class CountingJudge:
    """Passes every call to ``inner`` and counts requests and judged tags per class."""

    def __init__(self, inner: RelevanceJudge):
        self.inner = inner
        self.requests: Counter[str] = Counter()
        self.tags_judged: Counter[str] = Counter()

    @property
    def judge_id(self) -> str:
        return self.inner.judge_id

    @property
    def prompt_version(self) -> str:
        return self.inner.prompt_version

    @property
    def stats(self) -> JudgeStats:
        return self.inner.stats

    def judge(self, class_name: str, tags: list[str]) -> set[str]:
        self.requests[class_name] += 1
        self.tags_judged[class_name] += len(tags)
        return self.inner.judge(class_name, tags)
