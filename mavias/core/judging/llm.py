"""LLM judge: any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp) decides which tags are relevant.

Follows the paper's LLM step (supplement, "System Prompt"): tags of a class in batches of at most 100,
the model returns only the relevant ones as ``{"relevant_tags": [...]}``, everything else is irrelevant. The system
prompt is the paper's; sampling is fixed (temperature 0) and the answer is bounded by a JSON schema
whose items are an enum of the batch's tags, so a small model cannot repeat or invent tags until ``max_tokens``.

Reasoning models (OpenAI o-series, gpt-5) take ``max_completion_tokens`` instead of ``max_tokens``, which also pays
for their hidden reasoning, and refuse any temperature but the default: a 400 naming either parameter switches the
request shape once and the judge keeps it for its endpoint (``reasoning=True`` sets it from the start).
With ``samples`` > 1 each batch is asked that many times at ``SAMPLING_TEMPERATURE`` and a tag is relevant when a
strict majority of the answers lists it (self-consistency); every request counts in ``stats.requests``.
An unreadable answer is asked again at ``SAMPLING_TEMPERATURE`` (at temperature 0 the same request would get the
same answer), one cut off at its token limit (``finish_reason`` "length") with twice the room, up to ``MAX_ROOM``
times the first; the judge keeps the larger room for its later batches.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, urlsplit

import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from mavias.core.judging.answers import (
    CutOffAnswerError,
    UnreadableAnswerError,
    asked_tag,
    majority,
    parse_relevant_tags,
)
from mavias.core.judging.base import (
    BATCH_SIZE,
    JudgeConfigError,
    JudgeResponseError,
    JudgeStats,
    JudgeUnavailableError,
    batches,
    shown_url,
)
from mavias.core.judging.guards import RequestBudget

log = logging.getLogger(__name__)

PROMPT_VERSION = "paper-system-prompt-v1"
API_KEY_ENV = ("MAVIAS_LLM_API_KEY", "OPENAI_API_KEY")
NO_KEY = "no-key"  # local servers need none, but the client insists on one
STYLES = ("json_schema", "json_object", "plain")  # structured-output styles, most to least strict
REASONING_TOKENS = 4096  # room for a reasoning model's hidden reasoning, on top of the answer's own tokens
SAMPLING_TEMPERATURE = 0.7  # self-consistency needs different answers to vote on
MAX_ROOM = 8  # a cut-off answer doubles the token allowance up to this many times the first

# The supplement's system prompt (Fig. "System Prompt"), word for word; USER_TEMPLATE adds the class, the tags and the
# exact JSON form the answer's schema enforces.
SYSTEM_PROMPT = """\
I will provide you with the name of a target class and a large list of tags. Your task is to evaluate the tags and \
identify only those directly related to the target class. A tag is considered relevant if it describes or is an \
essential part of the object associated with the class name. This includes tags that refer to: physical components, \
defining features, inherent characteristics, and essential behaviors or functions of the object.

For example, if the target class is "bee", tags like "insect", "wing", and "buzz" are relevant because they describe \
core aspects of what a bee is or does.

Conversely, a tag is irrelevant if it refers to elements that are not an intrinsic part of the object. Irrelevant \
tags may include: background details, environmental context, colors (unless a defining characteristic), lighting, \
textures, other objects, or other non-essential contextual elements.

For example, in the case of the class "bee", tags like "sky", "flower", or "blue" would be irrelevant, as they \
describe the environment or background rather than the bee itself.

Please output only the relevant tags in JSON format only (i.e., { relevant_tags: [the list of tags]})."""

USER_TEMPLATE = """\
Class: {class_name}
Tags: {tags}

List only the tags that describe the {class_name} itself (its kinds, parts, defining features, essential \
behaviours); leave out background, scene, lighting, colours and other objects. Reply with JSON only: \
{{"relevant_tags": [...]}}"""


class _StyleUnsupportedError(Exception):
    pass


def api_key_from_environment(api_key: str | None) -> str:
    """The given key, else the first of $MAVIAS_LLM_API_KEY / $OPENAI_API_KEY, else a placeholder for local servers."""
    return api_key or next((os.environ[name] for name in API_KEY_ENV if os.environ.get(name)), NO_KEY)


def response_schema(tags: list[str]) -> dict[str, Any]:
    """The answer's JSON schema, bounded by the batch: only its tags, at most once each."""
    return {
        "type": "object",
        "properties": {
            "relevant_tags": {"type": "array", "items": {"type": "string", "enum": tags}, "maxItems": len(tags)}
        },
        "required": ["relevant_tags"],
        "additionalProperties": False,
    }


def _response_format(style: str, tags: list[str]) -> dict[str, Any] | None:
    schema = response_schema(tags)
    if style == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "relevant_tags", "strict": True, "schema": schema}}
    if style == "json_object":  # llama.cpp and others take the schema here and turn it into a grammar
        return {"type": "json_object", "schema": schema}
    return None


def _max_tokens(tags: list[str]) -> int:
    """Room for every tag of the batch quoted once, and no more (a tag is at most ~1 token per 3 characters)."""
    return 32 + sum(4 + len(tag) // 3 for tag in tags)


# --- errors and retries ----------------------------------------------------------------------------------------


def _is_style_error(error: openai.APIStatusError) -> bool:
    """A server that rejects the response_format style rather than failing (llama.cpp answers 500 to json_schema)."""
    if error.status_code not in (400, 422, 500, 501):
        return False
    text = f"{error.message} {error.body}".lower()
    return any(word in text for word in ("response_format", "json_schema", "json_object", "schema"))


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, openai.APIStatusError):
        return error.status_code in (408, 409, 429) or error.status_code >= 500
    return isinstance(error, (openai.APIConnectionError, UnreadableAnswerError))  # timeouts are connection errors


def _retry_after(error: BaseException | None) -> float | None:
    if not isinstance(error, openai.APIStatusError):
        return None
    value = error.response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date; exponential backoff is good enough


def _refused_parameter(error: openai.APIStatusError) -> str | None:
    """The request parameter a reasoning model refused as unsupported ("max_tokens", "temperature"), if that is the
    error (not a value out of range, e.g. a max_tokens beyond a small context: those stay errors)."""
    text = f"{error.message} {error.body}".lower()
    if error.status_code != 400 or not any(word in text for word in ("unsupported", "not supported", "doesn't support",
                                                                     "does not support")):
        return None
    return next((name for name in ("max_tokens", "temperature") if name in text.replace("max_completion", "")), None)


def check_base_url(base_url: str) -> None:
    """An http(s) URL with a host (and a readable port, if any), or one line saying what one looks like."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or not _readable_port(parts):
        raise JudgeConfigError(f"--base-url {shown_url(base_url)!r} is not an http(s) URL with a host",
                               hint="e.g. http://127.0.0.1:8000/v1 or https://api.openai.com/v1")


def _readable_port(parts: SplitResult) -> bool:
    try:
        parts.port  # noqa: B018 - urllib checks the port only when it is read
    except ValueError:
        return False
    return True


def key_may_travel(base_url: str) -> bool:
    """A key goes only over https or to this machine (loopback), never in clear text across a network."""
    parts = urlsplit(base_url)
    if parts.scheme == "https":
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _config_error(error: openai.APIStatusError, base_url: str, model: str) -> JudgeConfigError | None:
    if error.status_code in (401, 403):
        return JudgeConfigError(
            f"the LLM endpoint {base_url} refused the credentials (HTTP {error.status_code}); "
            f"set {' or '.join(API_KEY_ENV)} to a valid key"
        )
    if error.status_code == 404:
        return JudgeConfigError(f"model {model!r} not found at {base_url} (HTTP 404); check --llm-model and --base-url "
                                "($MAVIAS_LLM_MODEL and $MAVIAS_LLM_BASE_URL when they come from the environment)")
    return None


class LLMJudge:
    """Judges relevance with an OpenAI-compatible chat model; see the module docstring for the protocol."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        max_retries: int = 5,
        prompt_version: str = PROMPT_VERSION,
        batch_size: int = BATCH_SIZE,
        system_prompt_in_user: bool = False,
        backoff_seconds: float = 1.0,
        max_wait_seconds: float = 60.0,
        stats: JudgeStats | None = None,
        reasoning: bool = False,
        samples: int = 1,
        budget: RequestBudget | None = None,
    ):
        if samples < 1:
            raise JudgeConfigError(f"samples must be at least 1, got {samples}")
        check_base_url(base_url)
        key = api_key_from_environment(api_key)
        if key != NO_KEY and not key_may_travel(base_url):
            raise JudgeConfigError(f"refusing to send the LLM key in clear text to {shown_url(base_url)}",
                                   hint="use an https:// endpoint, or a server on this machine (127.0.0.1)")
        self.base_url = base_url
        self.where = shown_url(base_url)  # what messages and logs name
        self.model = model
        self.prompt_version = prompt_version
        self.batch_size = batch_size
        self.system_prompt_in_user = system_prompt_in_user  # for chat templates that drop the system message
        self.stats = stats or JudgeStats()
        self.style: str | None = None  # the structured-output style this endpoint accepted
        self.reasoning = reasoning  # max_completion_tokens and the default temperature (learnt from a 400 too)
        self.samples = samples
        self.room = 1  # times the answer's own token allowance (doubled by a cut-off answer, up to MAX_ROOM)
        self._resample = False  # this batch's last answer was unreadable: ask again at SAMPLING_TEMPERATURE
        self.budget = budget  # every request is charged to it, retries included
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff = backoff_seconds
        self._max_wait = max_wait_seconds
        self._client = openai.OpenAI(
            base_url=base_url, api_key=key, timeout=timeout, max_retries=0
        )

    @property
    def judge_id(self) -> str:
        """The model and the server that answers for it (local servers answer any model name with what they load),
        so decisions cached from one endpoint are never taken for another's."""
        vote, url = f"+vote{self.samples}" if self.samples > 1 else "", urlsplit(self.base_url)
        path = url.path.rstrip("/")  # a gateway's models behind one host (/qwen/v1, /llama/v1) are other judges
        return (f"llm:{self.model}{vote}@{url.hostname}" + (f":{url.port}" if url.port else "")  # never user:password
                + ("" if path in ("", "/v1") else path))

    def judge(self, class_name: str, tags: list[str]) -> set[str]:
        return {tag for batch in batches(tags, self.batch_size) for tag in self._vote(class_name, batch)}

    def _vote(self, class_name: str, tags: list[str]) -> set[str]:
        if self.samples == 1:
            return self._judge_batch(class_name, tags)
        answers = [self._judge_batch(class_name, tags) for _ in range(self.samples)]
        self.stats.tags_judged -= len(tags) * (self.samples - 1)  # tags, not samples
        return majority(answers)

    def _judge_batch(self, class_name: str, tags: list[str]) -> set[str]:
        self._resample = False
        answer = self._with_retries(lambda: self._ask(class_name, tags))
        by_key = {tag.strip().lower(): tag for tag in tags}
        chosen = {asked_tag(str(tag), by_key) for tag in answer}
        invented = {str(tag) for tag in answer if asked_tag(str(tag), by_key) is None}
        if invented:
            log.warning("%s: dropped %d tag(s) not in the batch: %s", class_name, len(invented), sorted(invented)[:5])
        self.stats.dropped_invented += len(invented)
        self.stats.tags_judged += len(tags)
        return chosen - {None}

    def _ask(self, class_name: str, tags: list[str]) -> list[str]:
        """One answer, in the strictest structured-output style the endpoint has not refused."""
        start = STYLES.index(self.style) if self.style else 0
        for style in STYLES[start:-1]:
            try:
                content = self._complete(class_name, tags, style)
            except _StyleUnsupportedError:
                log.info("%s does not take response_format style %r; trying the next", self.where, style)
                continue
            self.style = style
            return self._read(content, tags)
        self.style = STYLES[-1]
        return self._read(self._complete(class_name, tags, self.style), tags)

    def _read(self, answer: tuple[str, bool], tags: list[str]) -> list[str]:
        content, cut_off = answer
        try:
            return parse_relevant_tags(content)
        except UnreadableAnswerError:
            if not cut_off:
                raise
            limit = self._token_limit(tags)
            self.room = min(MAX_ROOM, self.room * 2)
            raise CutOffAnswerError(f"the answer was cut off at its limit of {limit} tokens (finish_reason 'length')")

    def _token_limit(self, tags: list[str]) -> int:
        return self.room * ((REASONING_TOKENS if self.reasoning else 0) + _max_tokens(tags))

    def _complete(self, class_name: str, tags: list[str], style: str) -> tuple[str, bool]:
        """The answer's text, and whether it was cut off at its token limit."""
        request: dict[str, Any] = {"model": self.model, "messages": self._messages(class_name, tags)}
        if self.reasoning:
            request["max_completion_tokens"] = self._token_limit(tags)
        else:
            request["max_tokens"] = self._token_limit(tags)
            request["temperature"] = SAMPLING_TEMPERATURE if self.samples > 1 or self._resample else 0
        response_format = _response_format(style, tags)
        if response_format is not None:
            request["response_format"] = response_format
        client = self._client
        if self.budget is not None:
            self.budget.charge()
            remaining = self.budget.remaining_seconds()
            if remaining is not None and remaining < self._timeout:  # no request outlives the deadline
                client = client.with_options(timeout=max(1.0, remaining))
        self.stats.requests += 1
        try:
            completion = client.chat.completions.create(**request)
        except openai.APIStatusError as error:
            if not self.reasoning and _refused_parameter(error):
                log.info("%s refused %r: switching to reasoning-model parameters", self.where,
                         _refused_parameter(error))
                self.reasoning = True
                return self._complete(class_name, tags, style)
            if style != "plain" and _is_style_error(error):
                raise _StyleUnsupportedError(style) from error
            config_error = _config_error(error, self.where, self.model)
            if config_error is not None:
                raise config_error from None  # the server's text may echo (part of) the key
            raise
        choices = getattr(completion, "choices", None)  # a gateway's 200 with an error, or another service's page
        if not choices or getattr(choices[0], "message", None) is None:
            raise UnreadableAnswerError("the server answered without a completion (no choices: an error or a page of "
                                        "another service?)")
        return choices[0].message.content or "", choices[0].finish_reason == "length"

    def _messages(self, class_name: str, tags: list[str]) -> list[dict[str, str]]:
        user = USER_TEMPLATE.format(class_name=class_name, tags=json.dumps(tags, ensure_ascii=False))
        if self.system_prompt_in_user:
            return [{"role": "user", "content": f"{SYSTEM_PROMPT}\n\n{user}"}]
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def _with_retries(self, call: Callable[[], list[str]]) -> list[str]:
        """Exponential backoff (or the server's Retry-After) on 429, 5xx, timeouts and unreadable answers."""
        retrying = Retrying(
            stop=stop_after_attempt(self._max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(_is_transient),
            before_sleep=self._count_retry,
            reraise=True,
        )
        try:
            return retrying(call)
        except CutOffAnswerError as error:
            raise JudgeResponseError(f"{self.model} at {self.where}: {error}",
                                     hint="use a model whose answers (with any hidden reasoning) fit that limit, or "
                                          "--judge offline") from error
        except UnreadableAnswerError as error:
            raise JudgeResponseError(f"{self.model} at {self.where}: {error}",
                                     hint="use a model that follows JSON instructions, or --judge offline") from error
        except openai.APIError as error:
            if not _is_transient(error):  # refused for good (a content filter, a context too long, no credit)
                status = getattr(error, "status_code", None)
                raise JudgeResponseError(
                    f"{self.model} at {self.where} refused a request ({type(error).__name__}"
                    f"{f', HTTP {status}' if status else ''})",  # not its text: a server may echo the request
                    hint="check the model's limits and the account, or use --judge offline") from None
            attempts = self._max_retries + 1
            raise JudgeUnavailableError(
                f"{self.where} failed {attempts} time(s) in a row; last: {type(error).__name__}: {error}",
                hint="check that the endpoint is up and --base-url (or $MAVIAS_LLM_BASE_URL) is right (lower "
                     "--timeout / --max-retries to fail sooner), or use --judge offline",
            ) from error

    def _wait(self, state: RetryCallState) -> float:
        retry_after = _retry_after(state.outcome.exception() if state.outcome else None)
        backoff = self._backoff * 2 ** (state.attempt_number - 1)
        remaining = None if self.budget is None else self.budget.remaining_seconds()
        # never past the deadline: the next attempt's charge then says the budget is spent
        return min(self._max_wait, backoff if retry_after is None else retry_after,
                   float("inf") if remaining is None else max(0.0, remaining))

    def _count_retry(self, state: RetryCallState) -> None:
        self.stats.retries += 1
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, UnreadableAnswerError) and not isinstance(error, CutOffAnswerError):
            self._resample = True
        log.warning("%s: attempt %d failed (%s); retrying", self.where, state.attempt_number, type(error).__name__)
