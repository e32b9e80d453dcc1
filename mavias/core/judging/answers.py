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


def _json_values(text: str):
    """Every JSON value embedded in ``text`` (code fences and chatter around it are skipped)."""
    decoder = json.JSONDecoder()
    for start, char in enumerate(text):
        if char in "{[":
            try:
                yield decoder.raw_decode(text, start)[0]
            except json.JSONDecodeError:
                continue


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
    bare_lists = []
    for value in _json_values(content):
        if isinstance(value, dict):
            found = next((v for k, v in value.items() if k.lower().replace(" ", "_") == "relevant_tags"), None)
            if isinstance(found, list):
                if all(isinstance(tag, str) for tag in found):
                    return found
                raise UnreadableAnswerError(f"relevant_tags holds more than strings: {content[:200]!r}")
        elif isinstance(value, list) and all(isinstance(tag, str) for tag in value):
            bare_lists.append(value)
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
