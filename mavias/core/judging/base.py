"""The judge interface: (class, tags) -> the subset of tags that is intrinsic to the class."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from mavias.errors import UserError

BATCH_SIZE = 100  # tags per judge call, as in the paper (supplement, "LLM prompt")
OFFLINE_SOURCE = "offline:"  # how the offline judge's id (a relevance row's source) begins


@dataclass
class JudgeStats:
    """Counters a judge and the decision cache keep for reports and tests."""

    requests: int = 0
    tags_judged: int = 0
    dropped_invented: int = 0
    retries: int = 0
    cache_hits: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@runtime_checkable
class RelevanceJudge(Protocol):
    """Decides which tags describe the class itself; every other tag is a potential bias."""

    @property
    def judge_id(self) -> str:
        """Identifies the judge and its model; part of every cache key."""

    @property
    def prompt_version(self) -> str:
        """Changes whenever the judge's rules change, so cached decisions are made again."""

    @property
    def stats(self) -> JudgeStats: ...

    def judge(self, class_name: str, tags: list[str]) -> set[str]:
        """The RELEVANT subset of ``tags`` for ``class_name``."""


@runtime_checkable
class ReadsClassSet(Protocol):
    """A judge that reads class names together: "star" among "circle" and "square" is a figure, not the sun."""

    def read_classes(self, class_names: list[str]) -> None:
        """Every class of the dataset, given before its first class is judged."""


def batches(tags: list[str], size: int = BATCH_SIZE) -> Iterator[list[str]]:
    """Consecutive chunks of at most ``size`` tags."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    for start in range(0, len(tags), size):
        yield tags[start : start + size]


class JudgeError(UserError, RuntimeError):
    """A judge could not decide; nothing of the failed batch was cached. The message says what to change: the
    endpoint, the model, or the judge (``--judge offline``)."""


class JudgeConfigError(JudgeError):
    """A judge that cannot work as configured (bad credentials, unknown model, missing data); retrying will not help."""


class JudgeUnavailableError(JudgeError):
    """The endpoint kept failing (429, 5xx, timeouts) through every retry."""


class JudgeResponseError(JudgeError):
    """The model's answers could not be read as a list of tags, even after retries."""


class JudgeBudgetSpentError(JudgeError):
    """The run's request budget or deadline is spent; the judge sends nothing more."""


def shown_url(url: str) -> str:
    """``url`` as messages, logs and reports show it: without a user:password or a query that may hold a key."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
