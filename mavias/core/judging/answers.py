"""Reading an LLM judge's answer: the ``relevant_tags`` list wherever the model put it, and which asked tag each of
its entries names."""

from __future__ import annotations

import json
import re
from collections import Counter

MAX_ANSWER_CHARS = 65_536  # an answer is read only this far: far beyond any batch's list, short of a flood
_KEY = re.compile(r'"relevant[_ ]tags"\s*:', re.IGNORECASE)


class UnreadableAnswerError(ValueError):
    """An answer without a complete list of asked tags (retried by the judge)."""


class CutOffAnswerError(UnreadableAnswerError):
    """An unreadable answer the server cut off at its token limit."""


_REASONING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)  # a reasoning model's drafts


def _json_values(text: str):
    """Every top-level JSON value embedded in ``text`` (code fences and chatter around it are skipped; a value inside
    another is part of it, never one of its own)."""
    decoder = json.JSONDecoder()
    start = 0
    while (start := _next_opening(text, start)) >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start += 1
            continue
        yield value
        start = end


def _keyed_lists(value: dict):
    """The lists under a ``relevant_tags`` key in ``value`` or the objects within it (``{"answer": {...}}``)."""
    for key, item in value.items():
        if key.lower().replace(" ", "_") == "relevant_tags" and isinstance(item, list):
            yield item
        elif isinstance(item, dict):
            yield from _keyed_lists(item)


def _next_opening(text: str, start: int) -> int:
    found = [index for index in (text.find("{", start), text.find("[", start)) if index >= 0]
    return min(found, default=-1)


def parse_relevant_tags(content: str) -> list[str]:
    """The tag list of an answer: a JSON object (or a bare list of strings) anywhere in it. Anything else is an
    unreadable answer, retried and then left to the caller: no list, a list of more than strings, nesting too deep
    to read, or a list cut off (e.g. by max_tokens), whose missing tags would silently count as irrelevant."""
    content = (content or "")[:MAX_ANSWER_CHARS]
    try:
        return _relevant_tags(content)
    except RecursionError:
        raise UnreadableAnswerError("the answer nests too deeply to read") from None


def _relevant_tags(content: str) -> list[str]:
    """The last ``relevant_tags`` list (a model restating its answer ends with it), else a lone bare list."""
    answered, malformed, bare_lists = [], [], []
    for value in _json_values(_REASONING.sub("", content)):
        if isinstance(value, dict):
            for found in _keyed_lists(value):
                (answered if all(isinstance(tag, str) for tag in found) else malformed).append(found)
        elif isinstance(value, list) and all(isinstance(tag, str) for tag in value):
            bare_lists.append(value)
    if answered:
        return answered[-1]
    if malformed:
        raise UnreadableAnswerError(f"relevant_tags holds more than strings: {content[:200]!r}")
    if bare_lists and not _KEY.search(content):  # a list inside a broken {"relevant_tags": ...} is a fragment
        return bare_lists[0]
    raise UnreadableAnswerError(f"no complete relevant_tags list of strings in the answer: {content[:200]!r}")


def asked_tag(answered: str, by_key: dict[str, str]) -> str | None:
    """The batch's tag an answer names: the same words up to case, or its singular or plural ("wings" for "wing"),
    as models inflect what they copy; ``None`` for a tag not asked about."""
    key = answered.strip().lower()
    forms = (key, key.removesuffix("es"), key.removesuffix("s"), f"{key}s", f"{key}es")
    return next((by_key[form] for form in forms if form in by_key), None)


def majority(answers: list[set[str]]) -> set[str]:
    """Tags listed by more than half of the answers."""
    counts = Counter(tag for answer in answers for tag in answer)
    return {tag for tag, count in counts.items() if 2 * count > len(answers)}
