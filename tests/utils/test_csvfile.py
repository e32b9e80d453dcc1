"""CSV files for people: a hostile tag never opens as a formula, numbers stay numbers, and reading back gives exactly
the values written, also through the quarantine list that is merged on every rewrite."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from mavias.core.manifest import quarantine_undecodable
from mavias.utils.csvfile import read_csv, write_csv

HYPERLINK = '=HYPERLINK("http://x","click")'
HOSTILE = [HYPERLINK, "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1+1", "\r=1+1"]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def raw_rows(path: Path) -> list[list[str]]:
    """The cells as a spreadsheet sees them: the file parsed as CSV, nothing undone."""
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("value", HOSTILE)
def test_a_formula_never_starts_a_cell(tmp_path: Path, value: str) -> None:
    path = write_csv(pd.DataFrame({value: [value, "plain"], "count": [1, 2]}), tmp_path / "tags.csv")

    header, first, second = raw_rows(path)
    assert header == [f"'{value}", "count"] and first == [f"'{value}", "1"] and second == ["plain", "2"]


def test_a_carriage_return_inside_a_cell_does_not_start_a_row(tmp_path: Path) -> None:
    path = write_csv(pd.DataFrame({"tag": [f"cat\r{HYPERLINK}"], "count": [1]}), tmp_path / "tags.csv")

    assert raw_rows(path) == [["tag", "count"], [f"cat\r{HYPERLINK}", "1"]]


def test_numbers_are_left_alone(tmp_path: Path) -> None:
    frame = pd.DataFrame({"gap": [-0.5, 0.25], "delta": [-3, 4], "label": ["-1", "+2.5e-3"]})
    path = write_csv(frame, tmp_path / "groups.csv")

    assert raw_rows(path)[1:] == [["-0.5", "-3", "-1"], ["0.25", "4", "+2.5e-3"]]
    pd.testing.assert_frame_equal(read_csv(path, dtype={"label": str}), frame)


def test_class_names_and_tags_that_look_like_numbers_read_back_as_the_names_written(tmp_path: Path) -> None:
    frame = pd.DataFrame({"class": ["0", "1"], "tag": ["7", "sky"], "label": ["010", "2"], "sample_id": ["1", "2"],
                          "score": [0.5, 1.0]})  # class folders 0/ and 1/ (a digits dataset); "010" keeps its zero
    path = write_csv(frame, tmp_path / "biased_tags.csv")

    pd.testing.assert_frame_equal(read_csv(path), frame)
    pd.testing.assert_frame_equal(read_csv(path, keep_default_na=False), frame)


def test_values_that_already_start_with_a_quote_round_trip(tmp_path: Path) -> None:
    frame = pd.DataFrame({"'note": ["'=x", "''", "'", "it's"], "n": [1, 2, 3, 4]})
    path = write_csv(frame, tmp_path / "notes.csv")

    assert raw_rows(path)[0] == ["''note", "n"]
    pd.testing.assert_frame_equal(read_csv(path, dtype={"'note": str}, keep_default_na=False), frame)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(), min_size=1, max_size=6))
def test_any_text_reads_back_exactly(tmp_path: Path, values: list[str]) -> None:
    frame = pd.DataFrame({"tag": values, "score": -0.5})
    path = write_csv(frame, tmp_path / "tags.csv")

    back = read_csv(path, dtype={"tag": str}, keep_default_na=False)

    assert back["tag"].tolist() == values and back["score"].tolist() == [-0.5] * len(values)
    assert all(is_number(cell) for row in raw_rows(path) for cell in row if cell.startswith(FORMULA_STARTS))


def test_the_quarantine_list_keeps_a_hostile_uri_inert_across_rewrites(tmp_path: Path) -> None:
    Image.new("RGB", (4, 4)).save(tmp_path / "fine.png")
    out = tmp_path / "quarantine.csv"
    first = pd.DataFrame({"sample_id": ["a", "b"], "uri": [HYPERLINK, "fine.png"], "label": "cat", "split": "train"})
    second = pd.DataFrame({"sample_id": ["c"], "uri": ["@missing.png"], "label": "cat", "split": "train"})

    quarantine_undecodable(first, tmp_path, out)
    quarantine_undecodable(second, tmp_path, out)  # merges with what the first run listed

    assert [row[1] for row in raw_rows(out)] == ["uri", f"'{HYPERLINK}", "'@missing.png"]
    listed = read_csv(out, dtype=str)
    assert listed.to_dict("list") == {"sample_id": ["a", "c"], "uri": [HYPERLINK, "@missing.png"],
                                      "reason": ["file not found", "file not found"]}
