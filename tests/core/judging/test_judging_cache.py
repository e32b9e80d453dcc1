import threading
from dataclasses import dataclass, field

import pytest

from mavias.core.judging.base import JudgeStats, RelevanceJudge, batches
from mavias.core.judging.cache import DecisionCache, decide, decide_all
from mavias.core.judging.names import CLASS_NAME_SOURCE
from mavias.core.judging.review import ReviewedDecisions
from mavias.core.relevance import RELEVANCE_COLUMNS


@dataclass
class RecordingJudge:
    relevant: set[str]
    prompt_version: str = "v1"
    judge_id: str = "recording"
    stats: JudgeStats = field(default_factory=JudgeStats)
    calls: list[tuple[str, list[str]]] = field(default_factory=list)

    def judge(self, class_name: str, tags: list[str]) -> set[str]:
        self.calls.append((class_name, list(tags)))
        self.stats.requests += 1
        return set(tags) & self.relevant


TAGS = ["wing", "sky", "beak", "forest", "tail"]


def test_the_recording_judge_satisfies_the_protocol():
    assert isinstance(RecordingJudge(set()), RelevanceJudge)


def test_batches_split_in_order():
    assert list(batches(["a", "b", "c"], 2)) == [["a", "b"], ["c"]]
    with pytest.raises(ValueError):
        list(batches(["a"], 0))


def test_decide_judges_unique_tags_once_in_batches_shuffled_by_class():
    judge = RecordingJudge({"wing", "beak", "tail"})
    table = decide(judge, "bird", TAGS + ["wing", " sky "], batch_size=2)
    sent = [tag for _, batch in judge.calls for tag in batch]
    assert [len(batch) for _, batch in judge.calls] == [2, 2, 1] and sorted(sent) == sorted(TAGS)
    assert sent != sorted(sent)  # the vocabulary's order does not decide which tags share a batch
    again = RecordingJudge({"wing"})
    decide(again, "bird", list(reversed(TAGS)), batch_size=2)
    assert again.calls == judge.calls  # the same batches on every run of the same class
    assert list(table.columns) == RELEVANCE_COLUMNS
    assert dict(zip(table["tag"], table["relevant"], strict=True)) == {
        "beak": True, "forest": False, "sky": False, "tail": True, "wing": True
    }  # fmt: skip
    assert set(table["source"]) == {"recording"}


def test_a_second_run_sends_nothing_and_only_new_tags_are_judged(tmp_path):
    path = tmp_path / "decisions.sqlite"
    first = RecordingJudge({"wing"})
    with DecisionCache(path) as cache:
        decide(first, "bird", TAGS, cache)
    again = RecordingJudge({"wing"})
    with DecisionCache(path) as cache:  # reopened: the decisions persist
        table = decide(again, "bird", TAGS, cache)
        assert again.calls == [] and again.stats.cache_hits == len(TAGS)
        assert table.equals(decide(first, "bird", TAGS))
        decide(again, "bird", [*TAGS, "feather"], cache)
    assert again.calls == [("bird", ["feather"])]


def test_decisions_are_per_class_judge_and_prompt_version(tmp_path):
    with DecisionCache(tmp_path / "decisions.sqlite") as cache:
        decide(RecordingJudge({"wing"}), "bird", TAGS, cache)
        for changed in (RecordingJudge({"wing"}, prompt_version="v2"), RecordingJudge({"wing"}, judge_id="other")):
            decide(changed, "bird", TAGS, cache)
            assert len(changed.calls) == 1 and changed.stats.cache_hits == 0
        plane = RecordingJudge({"wing"})
        decide(plane, "airplane", TAGS, cache)
        assert [sorted(batch) for _, batch in plane.calls] == [sorted(TAGS)]


def test_reviewed_decisions_win_and_are_never_sent_to_the_judge(tmp_path):
    review = ReviewedDecisions.model_validate({"decisions": {"bird": {"relevant": ["Sky"], "irrelevant": ["wing"]}}})
    judge = RecordingJudge({"wing", "beak"})
    with DecisionCache(tmp_path / "decisions.sqlite") as cache:
        decide(judge, "bird", TAGS, cache)  # caches wing = relevant
        table = decide(judge, "bird", TAGS, cache, review).set_index("tag")
    assert table.loc["sky", "relevant"] and not table.loc["wing", "relevant"]
    assert table.loc["sky", "source"] == table.loc["wing", "source"] == "review"
    assert table.loc["beak", "source"] == "recording"
    assert all("sky" not in tags and "wing" not in tags for _, tags in judge.calls[1:])


def test_a_tag_naming_the_class_is_relevant_without_asking_the_judge_unless_a_review_says_otherwise():
    judge = RecordingJudge(set())  # a judge that would call every tag irrelevant
    tags = ["Traffic_Lights", "traffic-light", "lights", "bird", "road"]
    table = decide(judge, "traffic light", tags).set_index("tag")
    assert sorted(tag for _, batch in judge.calls for tag in batch) == ["bird", "lights", "road"]
    assert table.loc[["Traffic_Lights", "traffic-light"], "relevant"].all()
    assert set(table.loc[["Traffic_Lights", "traffic-light"], "source"]) == {CLASS_NAME_SOURCE}
    assert not table.loc[["lights", "bird", "road"], "relevant"].any()
    assert decide(RecordingJudge(set()), "bus", ["buses", "bus", "busy"]).set_index("tag")["relevant"].to_dict() == {
        "bus": True, "buses": True, "busy": False}
    assert decide(RecordingJudge(set()), "butterflies", ["butterfly"])["relevant"].item()
    review = ReviewedDecisions.model_validate({"decisions": {"bird": {"irrelevant": ["birds"]}}})
    reviewed = decide(RecordingJudge(set()), "bird", ["birds"], review=review)
    assert not reviewed["relevant"].item() and reviewed["source"].item() == "review"


def test_decide_all_covers_every_class_in_order():
    table = decide_all(RecordingJudge({"wing"}), {"boat": ["sail"], "bird": ["wing", "sky"]})
    assert table[["class", "tag"]].values.tolist() == [["bird", "sky"], ["bird", "wing"], ["boat", "sail"]]
    assert decide_all(RecordingJudge(set()), {}).empty


def test_concurrent_writers_share_one_cache_file(tmp_path):
    path = tmp_path / "decisions.sqlite"
    errors: list[BaseException] = []

    def worker(class_name: str) -> None:
        try:
            with DecisionCache(path) as cache:
                for start in range(0, 200, 20):
                    decide(RecordingJudge(set()), class_name, [f"t{i}" for i in range(start + 20)], cache)
        except BaseException as error:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(f"class{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with DecisionCache(path) as cache:
        assert len(cache) == 3 * 200
