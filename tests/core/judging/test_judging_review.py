import pandas as pd
import pytest

from mavias.core.judging.review import ReviewError, apply_review, export_review, load_review, tags_of_classes


def table(rows):
    return pd.DataFrame(rows, columns=["class", "tag", "relevant", "source"])


def test_export_then_load_round_trips_the_decisions(tmp_path):
    decisions = table([("bird", "wing", True, "llm:x"), ("bird", "sky", False, "llm:x"), ("car", "road", False, "x")])
    path = export_review(decisions, tmp_path / "review.yaml")
    text = path.read_text()
    assert text.startswith("# Reviewed relevance decisions") and "version: 1" in text
    review = load_review(path)
    assert review.decisions["bird"].relevant == ["wing"] and review.decisions["bird"].irrelevant == ["sky"]
    assert review.verdicts("car", ["road", "tree"]) == {"road": False}


def test_apply_review_overrides_matching_tags_case_insensitively(tmp_path):
    (tmp_path / "review.yaml").write_text("version: 1\ndecisions:\n  bird:\n    relevant: [Sky]\n")
    decisions = table(
        [("bird", "sky", False, "offline"), ("bird", "tree", False, "offline"), ("car", "sky", False, "o")]
    )
    result = apply_review(decisions, load_review(tmp_path / "review.yaml"))
    assert result.values.tolist() == [
        ["bird", "sky", True, "review"], ["bird", "tree", False, "offline"], ["car", "sky", False, "o"]
    ]  # fmt: skip


@pytest.mark.parametrize(
    "document",
    [
        "version: 2\ndecisions: {}\n",
        "version: 1\ndecisions:\n  bird: {relevant: [wing], irrelevant: [WING]}\n",
        "version: 1\ndecisions:\n  bird: {relevent: [wing]}\n",
    ],
)
def test_invalid_review_files_are_rejected(tmp_path, document):
    (tmp_path / "review.yaml").write_text(document)
    with pytest.raises(ReviewError, match="invalid reviewed decisions"):
        load_review(tmp_path / "review.yaml")


def test_an_empty_review_file_decides_nothing(tmp_path):
    (tmp_path / "review.yaml").write_text("")
    assert load_review(tmp_path / "review.yaml").verdicts("bird", ["wing"]) == {}


def test_a_review_naming_a_class_the_data_lacks_is_one_warning_naming_it(tmp_path):
    (tmp_path / "review.yaml").write_text("version: 1\ndecisions:\n  birds: {relevant: [wing]}\n  car: {}\n")
    review = load_review(tmp_path / "review.yaml")
    [warning] = review.unmatched({"bird": {"wing"}, "car": set()})
    assert "1 class(es) the data does not have (birds)" in warning and "(bird, car)" in warning
    assert review.unmatched({"birds": {"wing"}, "car": set(), "boat": set()}) == []


def test_a_review_naming_a_tag_its_class_lacks_is_one_warning_naming_them(tmp_path):
    (tmp_path / "review.yaml").write_text("version: 1\ndecisions:\n  bird: {relevant: [Wing, feathr], "
                                          "irrelevant: [sky]}\n  car: {irrelevant: [sky]}\n")
    review = load_review(tmp_path / "review.yaml")
    [warning] = review.unmatched({"bird": {"wing", "sky"}, "car": {"road"}})
    assert "2 tag(s) their class does not have (bird: feathr, car: sky)" in warning
    assert "Wing" not in warning  # tags match case-insensitively
    assert review.unmatched({"bird": {"wing", "feathr", "sky"}, "car": {"sky"}}) == []


def test_the_tags_of_a_relevance_table_by_class_include_the_data_s_classes_without_tags():
    table = pd.DataFrame({"class": ["bird", "bird", "car"], "tag": ["wing", "sky", "road"],
                          "relevant": [True, False, False], "source": "judge"})
    assert tags_of_classes(table, ["boat", "bird"]) == {"boat": set(), "bird": {"wing", "sky"}, "car": {"road"}}
