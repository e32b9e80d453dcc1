"""The LLM judge against a real OpenAI-compatible server: llama.cpp serving the base Gemma 3 270M model.

The model is far too small to judge well, so these tests check the protocol (structured-output fallback, bounded
answers), batching, request counts and the decision cache, never the quality of its answers.
"""

from mavias.core.judging.cache import DecisionCache, decide
from mavias.core.judging.llm import LLMJudge

TAGS = ["beak", "branch", "eye", "feather", "forest", "sky", "tail", "water", "wing", "yellow"]


def test_llama_cpp_server_protocol_batches_and_cache(llama_server, tmp_path):
    # The gemma chat format drops the system message, so the instructions travel in the user message.
    judge = LLMJudge(llama_server, "gemma3-270m", timeout=120, max_retries=2, batch_size=4, system_prompt_in_user=True)
    with DecisionCache(tmp_path / "decisions.sqlite") as cache:
        table = decide(judge, "bird", TAGS, cache, batch_size=4)
        assert table["tag"].tolist() == TAGS
        assert set(table["source"]) == {f"llm:gemma3-270m@{llama_server.split('/')[2]}"}
        assert judge.style == "json_object"  # llama.cpp answers HTTP 500 to json_schema
        assert judge.stats.requests == 1 + 3  # the refused json_schema try, then ceil(10 / 4) batches
        assert judge.stats.tags_judged == len(TAGS)
        assert judge.stats.dropped_invented == 0  # the enum grammar leaves no room for invented tags

        again = decide(judge, "bird", TAGS, cache, batch_size=4)
    assert again.equals(table)
    assert judge.stats.requests == 4 and judge.stats.cache_hits == len(TAGS)


def test_llama_cpp_server_with_reasoning_parameters_and_voting(llama_server):
    # llama.cpp takes max_completion_tokens and no temperature, as reasoning models need
    judge = LLMJudge(llama_server, "gemma3-270m", timeout=120, max_retries=2, system_prompt_in_user=True,
                     reasoning=True, samples=3)  # fmt: skip
    relevant = judge.judge("bird", TAGS[:4])
    assert relevant <= set(TAGS[:4])
    assert judge.stats.requests == 1 + 3  # the refused json_schema try, then three samples of one batch
    assert judge.stats.tags_judged == 4
