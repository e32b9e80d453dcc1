"""`mavias audit` end to end, as a user runs it: the real command in its own process, its output piped (a log, not a
terminal), on generated image folders with a planted colour shortcut and a tags sidecar."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from markupsafe import escape

from mavias.core.datasets.generate import SHORTCUT_CLASSES, write_shortcut_imagefolder
from mavias.ops.gates import DEFAULT_GATES_PATH

REPO = Path(__file__).resolve().parents[3]
PLANTED = set(SHORTCUT_CLASSES.items())  # (class, its background colour)


def mavias(*args, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "MAVIAS_CACHE_DIR": str(cache), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "mavias.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=1500)


def ok(result: subprocess.CompletedProcess) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    return output


def biased_pairs(path: Path) -> set[tuple[str, str]]:
    table = pd.read_csv(path, keep_default_na=False)
    assert {"class", "tag"} <= set(table.columns)
    return set(zip(table["class"], table["tag"]))


@pytest.mark.slow
def test_an_audit_names_the_planted_shortcut_and_resumes(tmp_path):
    root, sidecar = write_shortcut_imagefolder(tmp_path / "photos" / "shapes", 200, align=0.85)
    out = tmp_path / "audit"
    args = ["audit", root, "--tags", sidecar, "--out", out, "--set", "epochs=10"]
    output = ok(mavias(*args, cache=tmp_path / "cache"))

    found = biased_pairs(out / "biased_tags.csv")
    assert found and found <= PLANTED, found  # the planted colours, nothing the data does not hold
    report = (out / "report.html").read_text()
    assert all(f"<strong>{name}</strong>" in report and tag in report for name, tag in found)
    assert all(f"validation images tagged {tag}" in report for name, tag in found)  # the images behind it
    assert "MAVias bias audit" in report and "Audit of shapes" in report
    card = json.loads((out / "model" / "model_card.json").read_text())
    assert card["gates"]["gates"] and card["metrics"]["open_set"]["min_support"] == 20
    trust = json.loads((out / "audit.json").read_text())["trust"]  # said on the console and in the report alike
    assert trust[0].startswith("Tags: the data's own tags") and "of the training images have no irrelevant" in trust[2]
    assert "how far to trust the tags" in output and all(f"  - {line}" in output for line in trust)
    assert all(str(escape(line)) in report for line in trust)

    # a log gets plain lines: one per epoch with its metrics, one per finished step with its output path
    assert "\r" not in output
    assert "erm epoch 10/10: train_loss" in output and "mavias epoch 1/10: train_loss" in output
    steps = {1: out / "data" / "manifest.parquet", 3: out / "reference", 6: out / "model" / "model.onnx",
             7: out / "report.html"}
    for number, path in steps.items():
        assert f"[{number}/7] " in output and f": {path} (" in output
    assert f"report: {out / 'report.html'}" in output and f"model: {out / 'model' / 'model.onnx'}" in output

    again = ok(mavias(*args, cache=tmp_path / "cache"))
    assert "erm epoch" not in again and "mavias epoch" not in again  # finished trainings are not repeated
    assert biased_pairs(out / "biased_tags.csv") == found
    assert "to correct a relevance decision: mavias judge export-review" in again

    # a person decides one shortcut's tag is relevant after all: the same audit with the review
    (name, tag), *_ = sorted(found)
    review = tmp_path / "review.yaml"
    review.write_text(f"version: 1\ndecisions:\n  {name}:\n    relevant: [{tag}, {tag}s]\n")
    reviewed = ok(mavias(*args, "--review", review, cache=tmp_path / "cache"))
    assert f"1 tag(s) their class does not have ({name}: {tag}s)" in " ".join(reviewed.split())
    assert "erm epoch" not in reviewed and "mavias epoch 1/10: train_loss" in reviewed  # only MAVias trains again
    assert biased_pairs(out / "biased_tags.csv") == found - {(name, tag)}
    assert "1 decision(s) of them overridden by the review" in " ".join((out / "report.html").read_text().split())
    assert json.loads((out / "model" / "model_card.json").read_text())["version"] != card["version"]
    assert "to correct another relevance decision: edit" in reviewed
    rerun = ok(mavias(*args, "--review", review, cache=tmp_path / "cache"))
    assert "erm epoch" not in rerun and "mavias epoch" not in rerun
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\ndecisions: [oops]\n")
    refused = mavias(*args, "--review", broken, cache=tmp_path / "cache")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr and "broken.yaml" in refused.stderr


@pytest.mark.slow
def test_an_audit_of_100_images_flags_every_figure_from_too_few_samples(tmp_path):
    root, sidecar = write_shortcut_imagefolder(tmp_path / "photos" / "shapes", 50, classes=2)
    out = tmp_path / "audit"
    (tmp_path / "words.txt").write_text("grass\n")
    args = ["audit", root, "--tags", sidecar, "--out", out, "--set", "epochs=5",  # the flags, not the models, are tested
            "--vocabulary", tmp_path / "words.txt"]
    output = ok(mavias(*args, cache=tmp_path / "cache"))
    assert "words.txt was not used: the images' tags come with the data" in " ".join(output.split())
    state = json.loads((out / "audit.json").read_text())
    report = (out / "report.html").read_text()
    # 100 images: 10 test images, no group reaches 20, so the worst group and the averages are flagged everywhere
    assert "(too few)" in output and "(small groups)" in output
    for where in (output, report, "\n".join(state["caveats"])):
        assert "fewer than the minimum support 20: it is noise" in " ".join(where.split())
    assert 'small</span>' in report

    # a higher minimum support, resumed without training again: B' is empty and every output says why
    output = ok(mavias(*args, "--min-support", "60", cache=tmp_path / "cache"))
    assert "erm epoch" not in output and not biased_pairs(out / "biased_tags.csv")
    why = "B' is empty): too few samples per tag: no (class, irrelevant tag) pair has --min-support 60 training images"
    report = " ".join((out / "report.html").read_text().split())
    assert why in " ".join(output.split()) and why.replace("'", "&#39;") in report
    assert "Groups with fewer than 60 samples are flagged" in report

    # a gates file of the user's own keeps its worst-group size; --min-support sets the shipped gates' only
    gates = tmp_path / "gates.yaml"
    gates.write_text(DEFAULT_GATES_PATH.read_text().replace("min_group_support: 20", "min_group_support: 3"))
    ok(mavias(*args, "--min-support", "60", "--gates", gates, cache=tmp_path / "cache"))
    gated = json.loads((out / "eval" / "mavias" / "gates.json").read_text())
    assert gated["config"]["min_group_support"] == 3
    assert [g["threshold"] for g in gated["gates"] if g["name"] == "min_group_support"] == [3]


@pytest.mark.slow
def test_tags_from_random_weights_are_refused_unless_allowed_and_then_called_noise(tmp_path):
    root, _ = write_shortcut_imagefolder(tmp_path / "photos" / "shapes", 12)
    vocabulary = tmp_path / "vocabulary.txt"
    vocabulary.write_text("red\ngreen\nblue\ngrass\nsky\n")
    args = ["audit", root, "--out", tmp_path / "audit", "--tagger-model", "ViT-S-32", "--pretrained", "none",
            "--vocabulary", vocabulary, "--device", "cpu"]
    refused = mavias(*args, cache=tmp_path / "cache")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "noise" in refused.stderr and "--allow-random-tags" in refused.stderr and "--tags" in refused.stderr

    output = ok(mavias(*args, "--allow-random-tags", "--set", "epochs=2", cache=tmp_path / "cache"))
    out = tmp_path / "audit"
    assert "randomly initialised model (--pretrained none): they are noise" in " ".join(output.split())
    assert "0 tags kept for all 36 images" in output  # the threshold rejects every tag of a random model
    assert "randomly initialised model" in (out / "report.html").read_text()
    assert json.loads((out / "audit.json").read_text())["tags_are_noise"] is True
    assert "caveat" in pd.read_csv(out / "biased_tags.csv").columns


def test_the_console_line_marks_a_shortcut_relied_on_within_its_class_only(tmp_path):
    from mavias.cli.audit import _biased_by_class

    path = tmp_path / "biased_tags.csv"
    pd.DataFrame({"class": ["bird", "bird", "car"], "tag": ["forest", "mushroom", "road"],
                  "cross_auc": [0.95, 0.45, 0.9], "cross_n_with": [60, 53, 40],
                  "cross_n_without": [700, 747, 700]}).to_csv(path, index=False)
    line = _biased_by_class(path)
    listed, hint = line.split("\n")
    assert listed == "bird: forest, mushroom (within the class only); car: road"
    assert hint.startswith("(within the class only: the reference leans on it") and "check its relevance" in hint
    path.write_text(path.read_text().replace("0.45", "0.91"))
    assert _biased_by_class(path) == "bird: forest, mushroom; car: road"
