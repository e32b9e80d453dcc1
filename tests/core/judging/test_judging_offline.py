"""The offline judge: quality floors on the built-in benchmark and on held-out vocabularies, and its rules."""

import pytest
from judge_heldout import heldout_relevance

from mavias.core.judging import wordnet
from mavias.core.judging.base import JudgeConfigError, RelevanceJudge
from mavias.core.judging.cache import decide_all
from mavias.core.judging.quality import evaluate_relevance
from mavias.core.synthetic.synthetic_scenes import SyntheticScenesConfig, ground_truth_relevance


def judged(judge, truth):
    return decide_all(judge, {name: rows["tag"] for name, rows in truth.groupby("class")})


def test_is_a_relevance_judge(offline_judge):
    assert isinstance(offline_judge, RelevanceJudge)
    assert offline_judge.judge_id.startswith("offline:wordnet-3.0")


def test_quality_floor_on_synthetic_scenes(offline_judge):
    truth = ground_truth_relevance(SyntheticScenesConfig().classes)
    scores = evaluate_relevance(judged(offline_judge, truth), truth).overall
    assert scores.precision >= 0.90 and scores.recall >= 0.70


def test_generalises_to_held_out_vocabularies(offline_judge):
    truth = heldout_relevance()  # Waterbirds-like, people, UrbanCars-like, dogs: written without running the judge
    scores = evaluate_relevance(judged(offline_judge, truth), truth).overall
    assert scores.precision >= 0.85 and scores.recall >= 0.70


@pytest.mark.parametrize(
    ("class_name", "relevant", "irrelevant"),
    [
        ("car", {"wheel", "headlight", "windshield", "tire", "door"}, {"street", "wing", "traffic light", "red"}),
        ("boat", {"hull", "sail", "mast", "canoe"}, {"sea", "water", "tower", "windshield", "small"}),
        ("bird", {"wing", "beak", "feathers", "flying", "animal"}, {"sky", "tree", "black", "dusk", "mushroom"}),
        ("blackbird", {"black", "wing"}, {"red", "tree"}),  # a colour that defines the class
        ("person", {"hand", "face", "hair"}, {"woman", "man", "child", "hat", "street"}),  # gender and age are not
        ("landbird", {"beak", "sparrow"}, {"land", "forest"}),  # a closed compound: judged by its head noun
        ("snowman", {"snow"}, {"winter", "carrot"}),  # what the class is made of
    ],
)
def test_rules(offline_judge, class_name, relevant, irrelevant):
    assert offline_judge.judge(class_name, sorted(relevant | irrelevant)) == relevant


@pytest.mark.parametrize("blank", ["_", "___", " _ "])
def test_a_tag_of_no_words_is_irrelevant_not_a_crash(offline_judge, blank):
    """A tagger or manifest may write "_"; judged with the class's words it named nothing."""
    assert offline_judge.judge("landbird", [blank, "wing"]) == {"wing"}


def test_an_unknown_class_only_keeps_its_own_name(offline_judge):
    assert offline_judge.judge("qwzxv", ["qwzxv", "sky", "wheel"]) == {"qwzxv"}


def test_missing_wordnet_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(wordnet, "SYSTEM_DICT_DIRS", ())
    monkeypatch.setattr(wordnet, "_nltk_wordnet", lambda: None)
    monkeypatch.setenv("MAVIAS_WORDNET_DIR", str(tmp_path))
    monkeypatch.delenv("WNSEARCHDIR", raising=False)
    wordnet.load_wordnet.cache_clear()
    try:
        with pytest.raises(JudgeConfigError, match="apt-get install wordnet-base"):
            wordnet.load_wordnet()
    finally:
        wordnet.load_wordnet.cache_clear()
