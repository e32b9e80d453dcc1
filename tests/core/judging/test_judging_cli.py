import pandas as pd
import pytest
from judge_fake_server import error
from typer.testing import CliRunner

from mavias.cli import app as root_app
from mavias.cli.judge import app
from mavias.core.judging.review import load_review
from mavias.core.manifest import save_manifest
from mavias.core.relevance import load_relevance

runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def llm_options(fake_llm, tmp_path) -> list[str]:
    return ["--judge", "llm", "--base-url", fake_llm.base_url, "--llm-model", "fake", "--cache", tmp_path / "c.sqlite"]


def test_run_judges_a_manifests_tags_per_class_and_caches(fake_llm, tmp_path):
    manifest = pd.DataFrame({
        "sample_id": ["a" * 16, "b" * 16, "c" * 16], "uri": ["1.png", "2.png", "3.png"],
        "label": ["bird", "bird", "boat"], "split": ["train", "train", "val"],
        "tags": [["wing", "sky"], ["wing", "water"], ["water", "sail"]],
    })  # fmt: skip
    save_manifest(manifest, tmp_path / "manifest.parquet")
    out = tmp_path / "relevance.parquet"
    invoke("run", "--manifest", tmp_path / "manifest.parquet", "--out", out, *llm_options(fake_llm, tmp_path))
    table = load_relevance(out)
    assert table[["class", "tag", "relevant"]].values.tolist() == [
        ["bird", "sky", False], ["bird", "water", True], ["bird", "wing", True],
        ["boat", "sail", False], ["boat", "water", True],
    ]  # fmt: skip
    assert len(fake_llm.requests) == 2
    second = invoke("run", "--manifest", tmp_path / "manifest.parquet", "--out", out, *llm_options(fake_llm, tmp_path))
    assert len(fake_llm.requests) == 2 and "judge stats" in second.output


def test_run_over_a_vocabulary_then_export_a_review(fake_llm, tmp_path):
    (tmp_path / "vocab.txt").write_text("wheel\nroad\nwindshield\n")
    out = tmp_path / "relevance.parquet"
    invoke("run", "--classes", "car", "--vocabulary", tmp_path / "vocab.txt", "--out", out,
           *llm_options(fake_llm, tmp_path))  # fmt: skip
    invoke("export-review", out, "--out", tmp_path / "review.yaml")
    review = load_review(tmp_path / "review.yaml")
    assert review.decisions["car"].relevant == ["wheel", "windshield"]
    assert review.decisions["car"].irrelevant == ["road"]


@pytest.mark.parametrize(("review", "warning", "reviewed"), [
    ("cars: {relevant: [road]}", "1 class(es) the data does not have (cars)", set()),
    ("car: {relevant: [wheels], irrelevant: [ROAD]}", "1 tag(s) their class does not have (car: wheels)", {"road"}),
])
def test_run_warns_when_the_review_names_a_class_or_tag_it_does_not_judge(tmp_path, review, warning, reviewed):
    (tmp_path / "vocab.txt").write_text("wheel\nroad\n")
    (tmp_path / "review.yaml").write_text(f"version: 1\ndecisions:\n  {review}\n")
    out = tmp_path / "relevance.parquet"
    result = invoke("run", "--classes", "car", "--vocabulary", tmp_path / "vocab.txt", "--out", out,
                    "--review", tmp_path / "review.yaml", "--no-cache")
    assert f"warning: the reviewed decisions name {warning}" in result.output
    table = load_relevance(out)
    assert set(table.loc[table["source"].eq("review"), "tag"]) == reviewed  # a tag matches whatever its case


def test_eval_prints_precision_and_recall(tmp_path):
    truth = pd.DataFrame({"class": ["car"] * 4, "tag": ["wheel", "road", "tire", "sky"],
                          "relevant": [True, False, True, False], "source": "ground_truth"})  # fmt: skip
    predicted = truth.assign(relevant=[True, True, False, False], source="judge")
    truth.to_parquet(tmp_path / "truth.parquet")
    predicted.to_parquet(tmp_path / "predicted.parquet")
    result = invoke("eval", "--truth", tmp_path / "truth.parquet", "--predicted", tmp_path / "predicted.parquet")
    assert "all (micro)" in result.output and "50.0" in result.output
    assert "│ car   │ tire" in result.output and "│ road" in result.output  # missed, then accepted
    assert "--review" in result.output


def test_eval_of_a_table_with_a_review_applies_it_and_warns_about_a_class_it_does_not_have(tmp_path):
    truth = pd.DataFrame({"class": ["car"] * 2, "tag": ["wheel", "road"], "relevant": [True, False],
                          "source": "ground_truth"})  # fmt: skip
    truth.to_parquet(tmp_path / "truth.parquet")
    truth.assign(relevant=[False, False], source="judge").to_parquet(tmp_path / "predicted.parquet")
    review = "version: 1\ndecisions:\n  car: {relevant: [wheel]}\n  cars: {relevant: [road]}\n"
    (tmp_path / "review.yaml").write_text(review)
    result = invoke("eval", "--truth", tmp_path / "truth.parquet", "--predicted", tmp_path / "predicted.parquet",
                    "--review", tmp_path / "review.yaml")
    assert "warning: the reviewed decisions name 1 class(es) the data does not have (cars)" in result.output
    assert "100.0" in result.output  # the review's verdict on car/wheel was applied: nothing missed


def test_eval_names_the_file_and_line_of_a_decision_it_cannot_read(tmp_path):
    (tmp_path / "truth.csv").write_text("class,tag,relevant\ncar,wheel,true\ncar,road,false\n")
    (tmp_path / "judged.csv").write_text("class,tag,relevant\ncar,wheel,true\ncar,road,maybe\n")
    result = runner.invoke(root_app, ["judge", "eval", "--truth", str(tmp_path / "truth.csv"),
                                      "--predicted", str(tmp_path / "judged.csv")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "judged.csv: column 'relevant' holds ['maybe'] on data row(s) 2; write true/false" in line


def test_eval_reads_a_csv_truth_without_source_and_compares_two_judges(fake_llm, tmp_path):
    (tmp_path / "truth.csv").write_text("class,tag,relevant\ncar,wheel,true\ncar,road,false\ncar,sky,false\n")
    result = invoke("eval", "--truth", tmp_path / "truth.csv", *llm_options(fake_llm, tmp_path), "--compare", "offline")
    assert "judges compared" in result.output
    assert "fake" in result.output and "offline:wordnet" in result.output
    assert len(fake_llm.requests) == 1


def test_eval_runs_a_judge_on_the_built_in_benchmark(fake_llm, tmp_path):
    result = invoke("eval", "--benchmark", "synthetic-scenes", *llm_options(fake_llm, tmp_path))
    assert "synthetic-scenes" in result.output and "all (micro)" in result.output


def test_eval_scores_the_offline_judge_on_every_built_in_image_benchmark(tmp_path):
    result = invoke("eval", "--benchmark", "digit-backgrounds", "--cache", tmp_path / "decisions.sqlite")
    assert "read-as-noun.quantity" in result.output  # the digits read as numbers
    assert "│ all (micro) │     100.0 │  100.0 │" in result.output  # their numeral included


def test_a_judge_that_cannot_work_ends_the_command_with_its_reason(fake_llm, tmp_path):
    fake_llm.default = lambda request: error(401, "invalid key")
    (tmp_path / "vocab.txt").write_text("wheel\n")
    args = ["judge", "run", "--classes", "car", "--vocabulary", tmp_path / "vocab.txt", "--out", tmp_path / "r.parquet"]
    result = runner.invoke(root_app, [str(a) for a in args + llm_options(fake_llm, tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output  # a user mistake: one line, exit 2
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "refused the credentials" in line and "MAVIAS_LLM_API_KEY" in line
    assert not (tmp_path / "r.parquet").exists()
