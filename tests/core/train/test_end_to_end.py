"""Train + evaluate through the command line on a tiny synthetic-scenes set (well under a minute on 2 cores)."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from mavias.cli import app

runner = CliRunner()


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_make_train_evaluate_end_to_end(tmp_path):
    data = tmp_path / "scenes"
    _invoke("data", "make", "synthetic-scenes", "--out", str(data), "--n-train", "240", "--n-val", "90",
            "--n-test-per-cell", "3", "--image-size", "32")
    common = ["--manifest", str(data / "manifest.parquet"), "--relevance", str(data / "relevance.parquet"),
              "--workspace", str(tmp_path / "ws")]
    small = ["--set", "epochs=2", "--set", "image_size=32", "--set", "backbone.width=8", "--set", "batch_size=32"]
    _invoke("train", *common, *small, "--set", "method=erm", "--set", "selection=val_acc", "--out", str(tmp_path / "erm"))
    biased = pd.read_csv(tmp_path / "erm" / "biased_tags.csv")
    assert list(biased.columns[:3]) == ["class", "tag", "support"]
    _invoke("train", *common, *small, "--set", "method=mavias", "--reference", str(tmp_path / "erm"),
            "--out", str(tmp_path / "mavias"))
    assert {"best_val_acc.pt", "best_val_tag_wg.pt", "last.pt", "config.yaml", "metrics.csv"} <= {
        p.name for p in (tmp_path / "mavias").iterdir()}
    out = _invoke("evaluate", "--run", str(tmp_path / "mavias"), "--reference", str(tmp_path / "erm"), *common,
                  "--group-attrs", "attr_bg_aligned,attr_coobj_aligned", "--out", str(tmp_path / "eval"))
    assert "open_set" in out
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["n_samples"] == 27 * 3
    closed = metrics["closed_set"]
    groups = pd.read_csv(tmp_path / "eval" / "groups_closed_set.csv")
    assert closed["worst_group_accuracy"] == groups["accuracy"].min()
    assert closed["worst_group_ci_low"] <= closed["worst_group_accuracy"] <= closed["worst_group_ci_high"]
    assert set(metrics["urbancars"]) == {"id_accuracy", "bg_gap", "coobj_gap", "both_gap"}
    assert metrics["open_set"]["n_groups"] <= 9  # per class: aligned, conflicting and decoys
    opened = pd.read_csv(tmp_path / "eval" / "groups_open_set.csv")
    assert {g.split("|")[1] for g in opened["group"]} <= {"aligned", "conflicting", "decoys"}
    paper = metrics["open_set"]["paper_groups"]  # the paper's 2·p groups: the same rows without the decoys
    own = opened[~opened["group"].str.endswith("|decoys")]
    assert paper["n_groups"] == len(own) and paper["worst_group_accuracy"] == own["accuracy"].min()
    assert paper["average_accuracy"] == pytest.approx(own["accuracy"].mean())

    label_free = _invoke("evaluate", "--run", str(tmp_path / "erm"), *common, "--out", str(tmp_path / "eval-erm"))
    assert "label-free groups from the run itself" in label_free
    metrics = json.loads((tmp_path / "eval-erm" / "metrics.json").read_text())
    assert 0 <= metrics["open_set"]["worst_group_accuracy"] <= 1  # without --group-attrs: the label-free groups
    assert "closed_set" in metrics  # dataset.json's attributes: the cross-check beside them
    unreferenced = _invoke("evaluate", "--run", str(tmp_path / "mavias"), *common, "--out", str(tmp_path / "eval-m"))
    assert "no --reference" in unreferenced and "--reference ERM_RUN" in unreferenced
