"""`mavias audit` mistakes end in one line with the fix, before any work is done."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets.generate import write_imagefolder, write_shortcut_imagefolder
from mavias.ops.audit.run import default_model_name
from mavias.ops.gates import DEFAULT_GATES_PATH

runner = CliRunner()


def fails_cleanly(*args, expect: str) -> str:
    result = runner.invoke(app, ["audit", *map(str, args)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "Traceback" not in message and expect in message, message
    return message


@pytest.fixture
def shapes(tmp_path):
    return write_shortcut_imagefolder(tmp_path / "photos" / "shapes", 4)


def test_a_path_that_does_not_exist(tmp_path):
    fails_cleanly(tmp_path / "nope", "--out", tmp_path / "audit", expect="nope does not exist; pass a folder of images")


def test_an_output_folder_inside_the_data(shapes):
    root, sidecar = shapes
    fails_cleanly(root, "--tags", sidecar, "--out", root / "audit", expect="lies inside the data folder")


def test_tags_from_random_weights_are_refused(shapes, tmp_path):
    root, _ = shapes
    message = fails_cleanly(root, "--pretrained", "none", "--out", tmp_path / "audit",
                            expect="makes tags that are noise")
    assert "--tags tags.csv" in message and "--allow-random-tags" in message
    assert not (tmp_path / "audit").exists()


def test_a_sidecar_that_names_none_of_the_images(shapes, tmp_path):
    root, _ = shapes
    (tmp_path / "other.csv").write_text("image,tags\nelsewhere/1.png,red\n")
    fails_cleanly(root, "--tags", tmp_path / "other.csv", "--out", tmp_path / "audit",
                  expect="none of the 1 images named in")


def test_a_folder_holding_an_audit_of_other_inputs(shapes, tmp_path):
    root, sidecar = shapes
    (tmp_path / "audit").mkdir()
    done = {"import": {"warnings": []}, "discover": {"counts": {}, "warnings": []}}
    (tmp_path / "audit" / "audit.json").write_text(json.dumps({"inputs": {"path": "/elsewhere"}, "done": done}))
    fails_cleanly(root, "--tags", sidecar, "--out", tmp_path / "audit",
                  expect="holds an audit of other data or settings")


def test_an_unknown_training_setting(shapes, tmp_path):
    root, sidecar = shapes
    fails_cleanly(root, "--tags", sidecar, "--out", tmp_path / "audit", "--set", "epoch=3",
                  expect="did you mean epochs?")


def test_other_inputs_start_again_while_only_the_import_is_done(shapes, tmp_path):
    """A first audit stopped at tagging; the second, with other inputs, imports again and stops where it must."""
    root, _ = shapes
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "audit.json").write_text(json.dumps({"inputs": {"path": "/elsewhere"},
                                                               "done": {"import": {"warnings": []}}}))
    message = fails_cleanly(root, "--out", tmp_path / "audit", "--weights-dir", tmp_path / "no-weights",
                            expect="are not in the local cache")
    assert "--tags tags.csv" in message
    assert json.loads((tmp_path / "audit" / "audit.json").read_text())["inputs"]["path"] == str(root.resolve())


def test_a_folder_of_one_class_is_refused_before_any_tagging_or_training(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 8})
    fails_cleanly(root, "--out", tmp_path / "audit",
                  expect="only class 'cat' in the training split; a classifier needs at least 2 classes")


def test_a_review_file_that_does_not_exist_stops_the_audit_before_any_work(shapes, tmp_path):
    root, sidecar = shapes
    fails_cleanly(root, "--tags", sidecar, "--out", tmp_path / "audit", "--review", tmp_path / "review.yaml",
                  expect="review.yaml do not exist; write them with `mavias judge export-review`")
    assert not (tmp_path / "audit").exists()


def test_a_folder_too_small_to_hold_images_back_for_testing_is_refused_before_any_training(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 2, "dog": 2})  # one to train on, one to validate with
    fails_cleanly(root, "--out", tmp_path / "audit", expect="has no test image: the models are evaluated on a test split")


def test_closed_set_gates_on_data_without_groups_are_refused_before_any_training(shapes, tmp_path):
    root, sidecar = shapes
    gates = tmp_path / "gates.yaml"
    gates.write_text(DEFAULT_GATES_PATH.read_text().replace("wg_source: open_set", "wg_source: closed_set"))
    fails_cleanly(root, "--tags", sidecar, "--out", tmp_path / "audit", "--gates", gates,
                  expect="gates on the closed-set worst group, which needs group attributes")
    assert "set wg_source: open_set" in fails_cleanly(root, "--tags", sidecar, "--out", tmp_path / "audit", "--gates",
                                                      gates, expect="has none")


@pytest.mark.parametrize(("folder", "name"), [("My Photos (2024)", "My-Photos-2024"), ("..x..y", "x.y"),
                                              ("shapes", "shapes"), ("((()))", "model")])
def test_a_data_folder_named_as_no_model_may_be_gives_a_model_name_that_the_registry_accepts(tmp_path, folder, name):
    assert default_model_name(tmp_path / folder) == name
