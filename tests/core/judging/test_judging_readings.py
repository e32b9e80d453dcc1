"""The offline judge reads a dataset's class names together: figures as figures, numbers as numbers."""

import pytest

from mavias.core.judging.cache import DecisionCache, decide_all
from mavias.core.judging.guarded import GuardedJudge
from mavias.core.judging.offline import OfflineJudge
from mavias.core.judging.quality import evaluate_relevance
from mavias.core.synthetic import digits, shapes

SHAPE_SET = ["circle", "triangle", "square", "diamond", "pentagon", "star", "cross", "arrow", "crescent", "heart"]
PATTERNS_AND_COLOURS = ["stripes", "waves", "zigzag", "diagonal", "grid", "dots", "checks", "red", "small"]


@pytest.fixture
def judge(minilm_encoder) -> OfflineJudge:
    return OfflineJudge(encoder=minilm_encoder)  # its own: reading a class set changes a judge's state


def test_a_set_of_figures_is_read_as_figures_and_their_outline_parts_describe_them(judge):
    assert judge.concept("star").synset.name() == "star.n.01"  # alone: the celestial body
    table = decide_all(judge, {name: ["corner", "edge", "tip", "rim", "point", "arc", *PATTERNS_AND_COLOURS]
                               for name in SHAPE_SET})
    assert judge.concept("star").synset.name() == "star.n.05"  # "a plane figure with 5 or more points"
    assert judge.concept("diamond").synset.name() == "rhombus.n.01"
    relevant = set(zip(table.loc[table["relevant"], "class"], table.loc[table["relevant"], "tag"]))
    parts = {("triangle", "corner"), ("square", "edge"), ("circle", "rim"), ("star", "point"), ("heart", "tip"),
             ("circle", "arc")}  # "a continuous portion of a circle"
    assert parts <= relevant
    assert not {tag for _, tag in relevant} & set(PATTERNS_AND_COLOURS)  # a background's pattern is no outline


def test_places_and_scenes_are_no_outline_parts_of_a_figure(judge):
    scenes = ["bus stop", "harbor", "coastline", "skyline", "home", "ground", "puddle", "face", "spots", "rooftop"]
    table = decide_all(judge, {name: ["corner", *scenes] for name in SHAPE_SET[:5]})
    relevant = table.loc[table["relevant"]]
    assert set(relevant["tag"]) == {"corner"}  # a figure's background is still a possible bias


def test_a_living_class_among_figures_is_not_read_as_a_figure(judge):
    table = decide_all(judge, {name: ["corner", "edge", "point", "tail"] for name in
                               ["circle", "square", "triangle", "dog", "cat"]})
    assert judge.concept("dog").figure is False and judge.concept("triangle").figure is True
    dog = table.loc[(table["class"] == "dog") & table["relevant"], "tag"]
    assert set(dog) == {"tail"}


def test_outline_parts_stay_out_of_a_set_of_things(judge):
    decide_all(judge, {"car": ["edge"], "boat": ["edge"], "bird": ["edge"]})
    assert judge.concept("car").figure is False
    assert judge.judge("car", ["corner", "edge", "wheel"]) == {"wheel"}


def test_digits_are_read_as_numbers_whose_numeral_is_theirs(judge):
    truth = digits.ground_truth_relevance()
    scores = evaluate_relevance(decide_all(judge, {c: set(r["tag"]) for c, r in truth.groupby("class")}), truth)
    assert judge.concept("zero").synset.name() == "zero.n.02"  # the digit, not "nothing" nor a gun sight
    assert scores.overall.recall == 1.0 and scores.overall.precision == 1.0  # "numeral" included


def test_the_shape_benchmarks_part_words_are_no_longer_leaked(judge):
    for cfg in (shapes.ShapesConfig(), shapes.ShapeTexturesConfig()):
        truth = shapes.ground_truth_relevance(cfg)
        scores = evaluate_relevance(decide_all(judge, {c: set(r["tag"]) for c, r in truth.groupby("class")}), truth)
        assert scores.overall.recall >= 0.9  # 0.50 and 0.47 when each class was read alone


def test_decisions_made_in_a_reading_are_cached_apart(judge, tmp_path):
    cache = DecisionCache(tmp_path / "decisions.sqlite")
    alone = judge.judge_id
    decide_all(judge, {"star": ["point"]}, cache)  # one class: no set to read together
    decide_all(judge, {name: ["point"] for name in SHAPE_SET}, cache)
    assert judge.judge_id == alone + "+read-as-noun.shape"
    assert cache.lookup(judge, "star", ["point"]) == {"point": True}
    decide_all(judge, {"star": ["point"]}, cache)
    assert judge.judge_id == alone and cache.lookup(judge, "star", ["point"]) == {"point": False}


def test_the_offline_judge_standing_in_for_an_llm_reads_the_set_too(judge):
    guarded = GuardedJudge(OfflineJudge(encoder=None), judge, fall_back=True)
    guarded.read_classes(SHAPE_SET)
    assert judge.concept("heart").synset.name() == "heart.n.07"
