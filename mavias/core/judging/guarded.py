"""An LLM judge behind guards (:mod:`mavias.core.judging.guards`), with the offline judge standing in.

The offline judge decides the tags the LLM must not see, and, with ``fall_back=True`` (the nightly flow), every tag
once the LLM has failed for good (unreachable through its retries, out of budget or past its deadline, refusing the
key or the model, or answering unreadably): a night goes on with cached decisions plus the offline judge's for new
pairs, and :attr:`GuardedJudge.failure` says why. Each part of a batch says who decided it (:class:`Decided`), so
the cache stores a decision under the judge that made it and a report can count them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from mavias.core.judging.base import JudgeError, JudgeStats, ReadsClassSet, RelevanceJudge
from mavias.core.judging.guards import implausible, unsafe_tag_reason

log = logging.getLogger(__name__)

# Who decided a (class, tag) pair in a run of `decide`: the configured judge, its earlier decision in the cache,
# the offline judge standing in for a failed LLM, the offline judge for a tag withheld from the LLM, a human review,
# the rule that a class's own name is relevant (mavias.core.judging.names).
DecisionSource = Literal["judge", "cache", "fallback", "withheld", "review", "name"]


@dataclass(frozen=True)
class Decided:
    """Verdicts on ``tags``: those in ``relevant`` are relevant; made by ``judge``; ``cache``: keep them."""

    tags: list[str]
    relevant: set[str]
    judge: RelevanceJudge
    source: DecisionSource
    cache: bool = True


class GuardedJudge:
    """``primary`` (an LLM judge) behind the guards, ``fallback`` (the offline judge) standing in; see the module."""

    def __init__(self, primary: RelevanceJudge, fallback: RelevanceJudge, *, fall_back: bool):
        self.primary = primary
        self.fallback = fallback
        self.fall_back = fall_back
        self.failure: str | None = None  # why the primary is no longer asked (fall_back only)

    @property
    def judge_id(self) -> str:
        return self.primary.judge_id

    @property
    def prompt_version(self) -> str:
        return self.primary.prompt_version

    @property
    def stats(self) -> JudgeStats:
        return self.primary.stats

    def read_classes(self, class_names: list[str]) -> None:
        """The offline judge standing in reads the classes together; the LLM sees each class as the paper asks."""
        if isinstance(self.fallback, ReadsClassSet):
            self.fallback.read_classes(class_names)

    def judge(self, class_name: str, tags: list[str]) -> set[str]:
        return {tag for part in self.decide_batch(class_name, tags) for tag in part.relevant}

    def decide_batch(self, class_name: str, tags: list[str]) -> list[Decided]:
        unsafe = {tag: reason for tag in tags if (reason := unsafe_tag_reason(tag))}
        parts = []
        if unsafe:
            log.warning("%s: %d tag(s) not sent to the LLM, the offline judge decides them: %s", class_name,
                        len(unsafe), "; ".join(f"{tag[:40]!r} ({reason})" for tag, reason in list(unsafe.items())[:3]))
            parts.append(self._by_fallback(class_name, list(unsafe), "withheld"))
        safe = [tag for tag in tags if tag not in unsafe]
        return parts + (self._ask(class_name, safe) if safe else [])

    def _ask(self, class_name: str, tags: list[str], *, retry_halves: bool = True) -> list[Decided]:
        if self.failure is not None:
            return [self._by_fallback(class_name, tags)]
        try:
            relevant = self.primary.judge(class_name, tags)
        except JudgeError as error:
            if not self.fall_back:
                raise
            self.failure = error.message
            log.warning("the LLM judge failed (%s); the offline judge decides the pairs not in the cache", error)
            return [self._by_fallback(class_name, tags)]
        if not implausible(relevant, tags):
            return [Decided(tags, relevant, self.primary, "judge")]
        if not retry_halves:
            log.warning("%s: %d of %d tags still called relevant in a smaller batch; kept, not cached", class_name,
                        len(relevant), len(tags))
            return [Decided(tags, relevant, self.primary, "judge", cache=False)]
        log.warning("%s: %d of %d tags called relevant, implausibly many; asking again in halves", class_name,
                    len(relevant), len(tags))
        half = len(tags) // 2
        parts = self._ask(class_name, tags[:half], retry_halves=False) + self._ask(
            class_name, tags[half:], retry_halves=False)
        return [Decided(p.tags, p.relevant, p.judge, p.source, cache=False) for p in parts]

    def _by_fallback(self, class_name: str, tags: list[str], source: DecisionSource = "fallback") -> Decided:
        return Decided(tags, self.fallback.judge(class_name, tags), self.fallback, source)


def decide_batch(judge: RelevanceJudge, class_name: str, tags: list[str]) -> list[Decided]:
    """``judge``'s verdicts on one batch, in parts by who decided them (a plain judge decides all of it)."""
    if isinstance(judge, GuardedJudge):
        return judge.decide_batch(class_name, tags)
    return [Decided(tags, judge.judge(class_name, tags), judge, "judge")]
