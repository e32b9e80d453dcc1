import pandas as pd
import pytest

from mavias.core.relevance import RelevanceError, irrelevant_tags, load_relevance, validate_relevance


def _table(rows: list[tuple[str, str, bool]]) -> pd.DataFrame:
    return validate_relevance(pd.DataFrame([(*row, "judge") for row in rows],
                                           columns=["class", "tag", "relevant", "source"]))


def test_a_tag_naming_another_class_of_the_task_stays_out_of_the_bias_path_whatever_the_judge_said():
    relevance = _table([("bird", "Boats", False), ("bird", "car", False), ("bird", "sky", False),
                        ("bird", "wing", True), ("boat", "sea", False), ("boat", "birdhouse", False),
                        ("car", "road", False)])
    labels = pd.Series(["bird", "boat"])  # "car" is a class of the task only through the relevance table
    tags = pd.Series([["wing", "sky", "Boats", "car"], ["sea", "birdhouse"]])
    assert irrelevant_tags(labels, tags, relevance).tolist() == [["sky"], ["birdhouse", "sea"]]
    paper = irrelevant_tags(labels, tags, relevance, keep_class_names=True)  # the paper's B_i: the judge decides
    assert paper.tolist() == [["Boats", "car", "sky"], ["birdhouse", "sea"]]


def test_an_undecided_tag_is_an_error_even_when_it_names_a_class():
    relevance = _table([("bird", "sky", False)])
    with pytest.raises(RelevanceError, match="no relevance decision"):
        irrelevant_tags(pd.Series(["bird"]), pd.Series([["sky", "boat"]]), relevance)


def test_a_class_s_own_name_follows_its_decision():  # a judge mistake there is the --leak stress's to measure
    relevance = _table([("bird", "bird", False), ("bird", "sky", False), ("boat", "sea", False)])
    assert irrelevant_tags(pd.Series(["bird"]), pd.Series([["bird", "sky"]]), relevance).tolist() == [["bird", "sky"]]


def test_a_parquet_table_with_relevant_as_words_is_read_as_the_words_say(tmp_path):
    path = tmp_path / "relevance.parquet"
    pd.DataFrame({"class": ["dog", "dog", "dog"], "tag": ["grass", "leash", "snout"],
                  "relevant": ["false", "False", "true"], "source": "judge"}).to_parquet(path)
    assert load_relevance(path).set_index("tag")["relevant"].to_dict() == {"grass": False, "leash": False,
                                                                              "snout": True}


@pytest.mark.parametrize("flags", [[1.0, 0.0], [1, 0]])
def test_numeric_flags_are_read_as_true_and_false(flags):
    table = validate_relevance(pd.DataFrame({"class": ["dog", "dog"], "tag": ["snout", "grass"],
                                             "relevant": flags, "source": "judge"}))
    assert table["relevant"].tolist() == [True, False]


def test_a_missing_decision_is_refused_not_taken_as_irrelevant(tmp_path):
    path = tmp_path / "relevance.parquet"
    pd.DataFrame({"class": ["dog", "dog"], "tag": ["grass", "snout"], "relevant": [False, None],
                  "source": "judge"}).to_parquet(path)
    with pytest.raises(RelevanceError, match=r"relevance.parquet: column 'relevant' holds \['None'\] on data row"):
        load_relevance(path)
