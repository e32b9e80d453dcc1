"""The LLM judge against a real local HTTP server that misbehaves on purpose."""

import json
import time

import pytest
from judge_fake_server import FakeLLM, batch_tags, completion, delayed, error, relevant_by

from mavias.core.judging.answers import UnreadableAnswerError, parse_relevant_tags
from mavias.core.judging.base import JudgeConfigError, JudgeResponseError, JudgeUnavailableError
from mavias.core.judging.cache import DecisionCache, decide
from mavias.core.judging.llm import SAMPLING_TEMPERATURE, LLMJudge

TAGS = ["beak", "sky", "water", "wing"]


def make_judge(server: FakeLLM, **options) -> LLMJudge:
    return LLMJudge(server.base_url, "fake-model", api_key="sk-test-secret-0042", timeout=5, backoff_seconds=0.01,
                    **options)  # fmt: skip


def test_answers_are_bounded_by_a_schema_of_the_batch(fake_llm):
    judge = make_judge(fake_llm)
    assert judge.judge("bird", TAGS) == {"water", "wing"}
    request = fake_llm.requests[0]
    assert request["temperature"] == 0
    schema = request["response_format"]["json_schema"]["schema"]["properties"]["relevant_tags"]
    assert schema["items"]["enum"] == TAGS and schema["maxItems"] == len(TAGS)
    assert [m["role"] for m in request["messages"]] == ["system", "user"]


def test_instructions_move_into_the_user_message_for_templates_without_a_system_role(fake_llm):
    make_judge(fake_llm, system_prompt_in_user=True).judge("bird", TAGS)
    messages = fake_llm.requests[0]["messages"]
    assert [m["role"] for m in messages] == ["user"]
    assert "background" in messages[0]["content"] and "Tags: " in messages[0]["content"]


def test_falls_back_between_structured_output_styles_and_remembers_the_one_that_works(fake_llm):
    def llama_like(request):  # llama.cpp's server: HTTP 500 to json_schema, a grammar for json_object
        if request["response_format"]["type"] == "json_schema":
            return error(500, "Input should be 'text' or 'json_object' ('body', 'response_format', 'type')")
        return relevant_by(lambda tag: tag == "wing")(request)

    fake_llm.default = llama_like
    judge = make_judge(fake_llm, batch_size=2)
    assert judge.judge("bird", TAGS) == {"wing"}
    assert judge.style == "json_object"
    styles = [r["response_format"]["type"] for r in fake_llm.requests]
    assert styles == ["json_schema", "json_object", "json_object"]  # the second batch goes straight to json_object
    assert fake_llm.requests[1]["response_format"]["schema"]["properties"]["relevant_tags"]["maxItems"] == 2
    assert judge.stats.retries == 0


def test_plain_prompting_when_no_structured_style_is_accepted(fake_llm):
    def no_response_format(request):
        if "response_format" in request:
            return error(400, "Unrecognized request argument supplied: response_format")
        return completion('Here you go:\n```json\n{"relevant_tags": ["wing"]}\n```')

    fake_llm.default = no_response_format
    judge = make_judge(fake_llm)
    assert judge.judge("bird", TAGS) == {"wing"}
    assert judge.style == "plain" and len(fake_llm.requests) == 3


def test_invented_tags_are_dropped_and_counted(fake_llm):
    fake_llm.then(completion(json.dumps({"relevant_tags": ["Wing", "unicorn", "feather"]})))
    judge = make_judge(fake_llm)
    assert judge.judge("bird", TAGS) == {"wing"}
    assert judge.stats.dropped_invented == 2


def test_an_answer_that_inflects_an_asked_tag_names_it(fake_llm):
    fake_llm.then(completion(json.dumps({"relevant_tags": ["Wings", "beaks", "skies"]})))
    judge = make_judge(fake_llm)
    assert judge.judge("bird", ["wing", "beak", "sky", "branch"]) == {"wing", "beak"}  # "skies": not a form it folds
    assert judge.stats.dropped_invented == 1


def test_malformed_json_is_retried_then_reported_and_nothing_is_cached(fake_llm, tmp_path):
    fake_llm.default = lambda request: completion("I think the wing is relevant")
    judge = make_judge(fake_llm, max_retries=2)
    with DecisionCache(tmp_path / "cache.sqlite") as cache:
        with pytest.raises(JudgeResponseError, match="no complete relevant_tags"):
            decide(judge, "bird", TAGS, cache)
        assert len(cache) == 0
    assert len(fake_llm.requests) == 3 and judge.stats.retries == 2


def test_an_unreadable_answer_is_asked_again_at_a_sampling_temperature_not_the_same_request(fake_llm):
    fake_llm.then(completion("I think the wing is relevant"))
    fake_llm.default = relevant_by(lambda tag: tag == "wing")
    judge = make_judge(fake_llm, batch_size=2)
    assert judge.judge("bird", TAGS) == {"wing"}
    temperatures = [r["temperature"] for r in fake_llm.requests]
    assert temperatures == [0, SAMPLING_TEMPERATURE, 0]  # the next batch is asked at 0 again


def test_an_answer_cut_off_at_its_token_limit_is_asked_again_with_twice_the_room(fake_llm):
    first_limit = None

    def short_context(request):  # a model whose answer needs more than the first allowance
        nonlocal first_limit
        first_limit = first_limit or request["max_tokens"]
        if request["max_tokens"] < 2 * first_limit:
            return completion('{"relevant_tags": ["wa', finish_reason="length")
        return relevant_by(lambda tag: tag in ("water", "wing"))(request)

    fake_llm.default = short_context
    judge = make_judge(fake_llm)
    assert judge.judge("bird", TAGS) == {"water", "wing"}
    assert [r["max_tokens"] for r in fake_llm.requests] == [first_limit, 2 * first_limit]
    assert {r["temperature"] for r in fake_llm.requests} == {0}  # the same question, more room
    judge.judge("bird", TAGS)
    assert fake_llm.requests[-1]["max_tokens"] == 2 * first_limit and len(fake_llm.requests) == 3  # kept


def test_an_answer_always_cut_off_says_so(fake_llm):
    fake_llm.default = lambda request: completion('{"relevant_tags": ["wa', finish_reason="length")
    judge = make_judge(fake_llm, max_retries=4)
    with pytest.raises(JudgeResponseError, match="cut off at its limit") as raised:
        judge.judge("bird", TAGS)
    assert "fit that limit" in raised.value.hint
    limits = [r["max_tokens"] for r in fake_llm.requests]
    assert limits == [limits[0] * n for n in (1, 2, 4, 8, 8)]  # doubled up to MAX_ROOM times the first


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"relevant_tags": ["wing"]}', ["wing"]),
        ('Sure! {"Relevant Tags": ["beak"]} hope this helps', ["beak"]),
        ('["wing", "beak"]', ["wing", "beak"]),
        ('<think>Draft: {"relevant_tags": ["sky", "wing"]} no, sky is background</think>{"relevant_tags": ["wing"]}',
         ["wing"]),  # a reasoning model's draft is not its answer
        ('{"relevant_tags": ["sky", "wing"]} On reflection: {"relevant_tags": ["wing"]}', ["wing"]),  # the last word
    ],
)
def test_tolerant_parsing(content, expected):
    assert parse_relevant_tags(content) == expected


@pytest.mark.parametrize("content", ['{"irrelevant_tags": ["sky", "branch"]}', '{"answer": {"tags": ["wing"]}}'])
def test_a_list_inside_another_key_is_not_the_relevant_tags(content):
    """Taking the irrelevant list as the relevant one would invert the decisions, and cache them for good."""
    with pytest.raises(UnreadableAnswerError, match="no complete relevant_tags"):
        parse_relevant_tags(content)


def test_http_500_then_success_is_retried(fake_llm):
    fake_llm.then(error(500, "upstream hiccup"))
    judge = make_judge(fake_llm)
    assert judge.judge("bird", TAGS) == {"water", "wing"}
    assert judge.stats.retries == 1 and judge.stats.requests == 2


def test_429_waits_as_long_as_retry_after_says(fake_llm):
    fake_llm.then(error(429, "slow down", {"Retry-After": "1"}))
    judge = LLMJudge(fake_llm.base_url, "fake-model", timeout=5, backoff_seconds=30)  # backoff alone would take 30 s
    started = time.monotonic()
    assert judge.judge("bird", TAGS) == {"water", "wing"}
    assert 0.9 <= time.monotonic() - started < 10
    assert judge.stats.retries == 1


def test_a_retry_after_beyond_the_deadline_is_not_slept_through(fake_llm):
    """With 2 s of the run's deadline left, a 429 asking for 120 s ends the judge's work at the deadline."""
    from mavias.core.judging.base import JudgeBudgetSpentError
    from mavias.core.judging.guards import RequestBudget

    fake_llm.then(error(429, "slow down", {"Retry-After": "120"}))
    budget = RequestBudget.lasting(100, 2.0)
    judge = LLMJudge(fake_llm.base_url, "fake-model", timeout=5, max_wait_seconds=300, budget=budget)
    started = time.monotonic()
    with pytest.raises(JudgeBudgetSpentError):
        judge.judge("bird", TAGS)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://host/v1", "http://:8000/v1", "http://host:port/v1",
                                 "http://user:s3cret@host:port/v1"])
def test_a_base_url_that_is_no_http_url_is_named_at_once(url):
    with pytest.raises(JudgeConfigError, match="is not an http\\(s\\) URL with a host") as error:
        LLMJudge(url, "fake-model")
    assert "s3cret" not in str(error.value)


def test_credentials_in_the_base_url_are_shown_nowhere():
    """user:password or a key in the query stay out of messages, logs, reports and the cache's judge id."""
    from mavias.core.judging.factory import JudgeSettings, describe_judge

    url = "https://user:s3cret@gateway.example/qwen/v1?key=s3cret"
    judge = LLMJudge(url, "default", api_key="sk-x")
    assert "s3cret" not in judge.where + judge.judge_id + describe_judge(JudgeSettings(kind="llm", base_url=url))[0]
    assert judge.where == "https://gateway.example/qwen/v1"


def test_models_behind_one_gateway_are_judges_of_their_own():
    """Local gateways answer any model name: /qwen/v1 and /llama/v1 on one host must not share cached decisions."""
    ids = {LLMJudge(f"http://127.0.0.1:9/{name}/v1", "default").judge_id for name in ("qwen", "llama")}
    assert len(ids) == 2
    assert LLMJudge("http://127.0.0.1:9/v1", "default").judge_id == "llm:default@127.0.0.1:9"  # caches kept


def test_a_response_slower_than_the_timeout_is_retried(fake_llm):
    fake_llm.then(delayed(2, fake_llm.default))
    judge = LLMJudge(fake_llm.base_url, "fake-model", timeout=0.5, backoff_seconds=0.01)
    assert judge.judge("bird", TAGS) == {"water", "wing"}
    assert judge.stats.retries == 1


def test_an_endpoint_that_keeps_failing_gives_a_clear_error(fake_llm):
    fake_llm.default = lambda request: error(503, "overloaded")
    judge = make_judge(fake_llm, max_retries=2)
    with pytest.raises(JudgeUnavailableError, match="failed 3 time"):
        judge.judge("bird", TAGS)


@pytest.mark.parametrize(("status", "message"), [(401, "credentials"), (403, "credentials"), (404, "not found")])
def test_bad_credentials_or_unknown_model_fail_at_once_without_leaking_the_key(fake_llm, status, message):
    fake_llm.default = lambda request: error(status, "Incorrect API key provided: sk-test-secret-0042")
    judge = make_judge(fake_llm)
    with pytest.raises(JudgeConfigError, match=message) as raised:
        judge.judge("bird", TAGS)
    assert "sk-test-secret-0042" not in str(raised.value)
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize("status", [400, 402, 413, 422])
def test_a_request_refused_for_good_is_a_judge_error_sent_once_without_the_server_s_text(fake_llm, status):
    fake_llm.default = lambda request: error(status, "context length exceeded for sk-test-secret-0042")
    judge = make_judge(fake_llm)
    with pytest.raises(JudgeResponseError, match=f"refused a request .*HTTP {status}") as raised:
        judge.judge("bird", TAGS)  # a judge error: a night's guarded judge hands over to the offline judge
    assert "sk-test-secret-0042" not in str(raised.value) and len(fake_llm.requests) == 1


def test_batches_of_at_most_100_tags_each_cached_once(fake_llm, tmp_path):
    tags = [f"w{i:03d}" if i % 2 else f"t{i:03d}" for i in range(250)]
    judge = make_judge(fake_llm)
    with DecisionCache(tmp_path / "cache.sqlite") as cache:
        table = decide(judge, "thing", reversed(tags), cache)
        assert [len(batch_tags(r)) for r in fake_llm.requests] == [100, 100, 50]
        assert sorted(t for r in fake_llm.requests for t in batch_tags(r)) == sorted(tags)  # each tag asked once
        assert set(table.loc[table["relevant"], "tag"]) == {t for t in tags if t.startswith("w")}
        decide(judge, "thing", tags, cache)
    assert len(fake_llm.requests) == 3 and judge.stats.cache_hits == 250


def refuse(parameter: str, reply):
    """A reasoning model's endpoint: 400 for a request that carries ``parameter``, else ``reply``."""
    message = f"Unsupported parameter: '{parameter}' is not supported with this model."
    return lambda request: error(400, message) if parameter in request else reply(request)


@pytest.mark.parametrize("parameter", ["max_tokens", "temperature"])
def test_a_reasoning_model_gets_its_parameters_after_one_400_and_keeps_them(fake_llm, parameter):
    fake_llm.default = refuse(parameter, fake_llm.default)
    judge = LLMJudge(fake_llm.base_url, "o-mini", max_retries=0)
    assert judge.judge("car", ["wheel", "road"]) == {"wheel"}
    assert judge.judge("bird", ["wing", "sky"]) == {"wing"}
    assert len(fake_llm.requests) == 3  # one refused, then one per batch
    sent = fake_llm.requests[-1]
    assert "max_tokens" not in sent and "temperature" not in sent and sent["max_completion_tokens"] > 4096


def test_a_max_tokens_beyond_a_small_context_is_no_reason_to_switch_to_reasoning_parameters(fake_llm):
    fake_llm.default = lambda request: error(400, "'max_tokens' is too large: 4160. This model's maximum context "
                                                 "length is 2048 tokens")
    judge = LLMJudge(fake_llm.base_url, "small-context", max_retries=0)
    with pytest.raises(JudgeResponseError, match="HTTP 400"):
        judge.judge("car", ["wheel", "road"])
    assert not judge.reasoning and len(fake_llm.requests) == 1


def test_self_consistency_keeps_the_majority_and_counts_every_request(fake_llm):
    answers = [["wheel", "road"], ["wheel"], ["wheel", "sky"]]
    fake_llm.then(*(completion(json.dumps({"relevant_tags": a})) for a in answers))
    judge = LLMJudge(fake_llm.base_url, "fake", max_retries=0, samples=3)
    assert judge.judge("car", ["wheel", "road", "sky"]) == {"wheel"}
    assert judge.stats.requests == 3 and judge.stats.tags_judged == 3
    assert {r["temperature"] for r in fake_llm.requests} == {SAMPLING_TEMPERATURE}
    assert judge.judge_id == f"llm:fake+vote3@{fake_llm.base_url.split('/')[2]}"
