"""Every user mistake on the command line ends in one readable red line and exit status 2, never a traceback."""

import os
import shlex

import pandas as pd
import pytest
from typer.testing import CliRunner

from mavias.cli import app
from mavias.core.datasets.generate import write_imagefolder
from mavias.core.relevance import load_relevance
from mavias.core.train.config import TrainConfig, preset_names, save_config

runner = CliRunner()


def fails_cleanly(*args, expect: str):
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})  # a message on one line
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and expect in result.output
    return result


@pytest.fixture
def files(tmp_path):
    (tmp_path / "truth.csv").write_text("class,tag,relevant,source\ncar,wheel,true,gt\ncar,road,false,gt\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "bad.yaml").write_text("epochs: [1, 2\n")
    (tmp_path / "manifest.csv").write_text("sample_id,uri,label,split\na,1.png,car,train\n")
    return tmp_path


def test_a_relevance_table_in_an_unsupported_format(files):
    fails_cleanly("judge", "eval", "--truth", files / "notes.txt", expect="unsupported format '.txt'")


def test_a_relevance_table_as_csv_is_accepted(files):
    result = runner.invoke(app, ["judge", "export-review", str(files / "truth.csv"), "--out", str(files / "r.yaml")])
    assert result.exit_code == 0, result.output
    assert (files / "r.yaml").exists()


def test_a_relevance_table_is_written_in_the_format_its_name_says(files):
    (files / "vocabulary.txt").write_text("wheel\nroad\nwing\n")
    args = ["judge", "run", "--classes", "car,bird", "--vocabulary", str(files / "vocabulary.txt"), "--no-cache", "--out"]
    for name in ("r.csv", "r.parquet"):
        result = runner.invoke(app, [*args, str(files / name)])
        assert result.exit_code == 0, result.output
    written = pd.read_csv(files / "r.csv", dtype=str)
    assert set(written["relevant"]) == {"true", "false"}
    pd.testing.assert_frame_equal(load_relevance(files / "r.csv"), load_relevance(files / "r.parquet"))
    fails_cleanly(*args, files / "r.txt", expect="written as .parquet or .csv")
    assert not (files / "r.txt").exists()


def test_a_nonexistent_path(files):
    fails_cleanly("judge", "eval", "--truth", files / "nope.parquet", expect="does not exist")


def test_a_table_without_a_required_column(files):
    pd.DataFrame({"class": ["car"], "tag": ["wheel"], "relevant": [True]}).to_csv(files / "pred.csv", index=False)
    fails_cleanly("judge", "eval", "--truth", files / "truth.csv", "--predicted", files / "pred.csv",
                  expect="lacks column(s) ['source']")  # fmt: skip


def test_a_truth_table_without_source_is_accepted(files):
    (files / "t.csv").write_text("class,tag,relevant\ncar,wheel,true\ncar,road,false\n")
    pd.read_csv(files / "truth.csv").to_csv(files / "pred.csv", index=False)
    result = runner.invoke(app, ["judge", "eval", "--truth", str(files / "t.csv"), "--predicted", str(files / "pred.csv")])
    assert result.exit_code == 0, result.output


def test_a_relevant_column_that_is_not_true_or_false(files):
    (files / "t.csv").write_text("class,tag,relevant\ncar,wheel,maybe\n")
    fails_cleanly("judge", "eval", "--truth", files / "t.csv", "--predicted", files / "t.csv", expect="true/false")


def test_a_manifest_of_the_wrong_type(files):
    fails_cleanly("judge", "run", "--manifest", files / "notes.txt", expect="unsupported format '.txt'")


def train_args(files, *extra):
    return ["train", "--manifest", files / "manifest.csv", "--relevance", files / "truth.csv", "--out", files / "run",
            *extra]  # fmt: skip


def test_an_unknown_set_key(files):
    fails_cleanly(*train_args(files, "--set", "epochz=3"), expect="epochz: Extra inputs are not permitted")


def test_an_unknown_set_section_is_named_as_typed(files):
    fails_cleanly(*train_args(files, "--set", "mavis.lam=0.4"),
                  expect="mavis.lam: Extra inputs are not permitted (got 0.4); did you mean mavias.lam?")


def test_a_bad_set_value(files):
    fails_cleanly(*train_args(files, "--set", "epochs=many"), expect="epochs: Input should be a valid integer")


def test_bad_yaml(files):
    fails_cleanly(*train_args(files, "--config", files / "bad.yaml"), expect="is not valid YAML")


def test_an_unknown_preset(files):
    fails_cleanly(*train_args(files, "--preset", "synthetic-scenes"), expect="unknown preset 'synthetic-scenes'")


def test_train_help_lists_the_presets_that_exist():
    result = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and ", ".join(preset_names()) in result.output
    assert "synthetic-scenes" not in result.output


def test_debug_shows_the_traceback(files):
    result = runner.invoke(app, ["--debug", "judge", "eval", "--truth", str(files / "nope.parquet")])
    assert result.exit_code != 0 and "does not exist" in str(result.exception)


def test_bad_yaml_in_reviewed_decisions(files):
    fails_cleanly("judge", "run", "--classes", "car", "--vocabulary", files / "notes.txt", "--no-cache",
                  "--review", files / "bad.yaml", expect="bad.yaml are not valid YAML")  # fmt: skip


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ("{bad", "cannot read it as JSON"),
        ("[0.01]", "expected a JSON object of settings"),
        ('{"alfa": 0.01}', "unknown setting(s) alfa"),
        ('{"mavias.alpha": 5}', "mavias.alpha = 5 is outside the searched range [0.001, 1]"),
        ('{"epochs": 100}', "epochs = 100 is outside the searched range [5, 15]"),
    ],
)
def test_a_bad_warm_start_for_the_search(files, content, expect):
    (files / "warm.json").write_text(content)
    fails_cleanly("tune", "--manifest", files / "manifest.csv", "--relevance", files / "truth.csv",
                  "--reference", files, "--out", files / "search", "--warm-start", files / "warm.json",
                  "--set", "epochs=10", expect=expect)  # fmt: skip
    assert not (files / "search").exists()  # refused before any data is prepared


def test_an_unknown_benchmark_for_the_criteria_analysis(tmp_path):
    fails_cleanly("bench", "criteria", "--benchmark", "nope", "--work", tmp_path,
                  expect="use --benchmark synthetic-scenes or shape-colours or shape-textures")


@pytest.mark.parametrize("bench", ["core", "audit"])
def test_an_unknown_benchmark_for_the_core_and_audit_benches(tmp_path, bench):
    fails_cleanly("bench", bench, "--benchmark", "shape-colors", "--work", tmp_path,
                  expect="use --benchmark synthetic-scenes or shape-colours or shape-textures or digit-backgrounds")


@pytest.mark.parametrize("args", [["criteria", "--seed", "-1"], ["core", "--seeds", "0"], ["core", "--trials", "-1"]])
def test_out_of_range_bench_settings(tmp_path, args):
    fails_cleanly("bench", *args, "--work", tmp_path, expect="Invalid value")


def test_one_trial_is_no_search_and_the_bench_says_what_to_give(tmp_path):
    fails_cleanly("bench", "core", "--trials", "1", "--work", tmp_path, expect="give --trials 0 (no search) or 2")


@pytest.mark.parametrize(("args", "expect"), [
    (["--nproc", "2", "--set", "method=lff"], "cannot train data-parallel"),
    (["--nproc", "0"], "--nproc must be at least 1"),
])
def test_a_training_that_cannot_be_spread_over_processes(files, args, expect):
    fails_cleanly(*train_args(files, *args), expect=expect)


@pytest.mark.parametrize("args", [["--scales", "1,x"], ["--scales", "0,4"], ["--base", "10"], ["--plot", "fig.txt"]])
def test_bad_sizes_for_the_scale_bench(tmp_path, args):
    fails_cleanly("bench", "scale", *args, "--work", tmp_path, expect="Invalid value")


def test_two_options_that_say_different_things_are_refused(files):
    """Neither is quietly dropped for the other."""
    for name in ("tags.parquet", "vocabulary.txt"):
        (files / name).write_text("x\n")
    fails_cleanly("tag", "--manifest", files / "manifest.csv", "--out", files / "tags", "--shard", "0/8",
                  "--num-shards", "4", expect="--shard 0/8 splits the partition in 8, --num-shards in 4")
    fails_cleanly("judge", "run", "--classes", "cat", "--tags", files / "tags.parquet", "--out", files / "r.csv",
                  expect="--tags goes with --manifest")
    fails_cleanly("judge", "run", "--manifest", files / "manifest.csv", "--vocabulary", files / "vocabulary.txt",
                  "--out", files / "r.csv", expect="--vocabulary goes with --classes")


def test_a_data_bench_of_one_batch_is_refused(tmp_path):
    fails_cleanly("bench", "data", "--batches", "1", "--work", tmp_path, expect="Invalid value")


def test_an_unknown_set_key_names_the_closest_one(files):
    fails_cleanly(*train_args(files, "--set", "methd=mavias"), expect="did you mean method?")
    fails_cleanly(*train_args(files, "--set", "lam=0.4"), expect="did you mean mavias.lam?")


@pytest.fixture
def photos(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 10, "dog": 10, "owl": 1})
    result = runner.invoke(app, ["data", "import", "imagefolder", str(root), "--out", str(tmp_path / "ds")],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    return tmp_path, result.output


def test_an_import_warns_of_a_class_too_small_to_validate_and_points_at_discover(photos):
    tmp_path, output = photos
    assert "class 'owl' has 1 image(s) and no val or test image" in output
    assert f"next: mavias discover --partition {tmp_path / 'ds'}" in output and "mavias audit" in output


def test_the_next_command_is_printed_ready_to_paste_whatever_the_folder_is_called(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 3, "dog": 3})
    out = tmp_path / "my [best] run"
    result = runner.invoke(app, ["data", "import", "imagefolder", str(root), "--out", str(out)],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("next: "))
    words = shlex.split(line.removeprefix("next: ").split("  (or every step")[0])
    assert words == ["mavias", "discover", "--partition", str(out), "--workspace", str(tmp_path / "workspace")]


def test_split_folders_without_a_validation_split_or_with_split_fractions_are_refused(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 3, "dog": 3}, splits=("train",))
    fails_cleanly("data", "import", "imagefolder", root, "--out", tmp_path / "a", "--split-from",
                  expect="found no val/<class>/ images")
    fails_cleanly("data", "import", "imagefolder", root, "--out", tmp_path / "b", "--split-from", "--val", "0.3",
                  expect="drop --split-from, or --val and --test")


def test_a_bias_ratio_without_biased_or_out_of_range_is_refused(tmp_path):
    (tmp_path / "celeba").mkdir()
    fails_cleanly("data", "import", "celeba", tmp_path / "celeba", "--out", tmp_path / "o", "--bias-ratio", "0.8",
                  expect="add --biased")
    fails_cleanly("data", "import", "celeba", tmp_path / "celeba", "--out", tmp_path / "o", "--biased",
                  "--bias-ratio", "7", expect="--bias-ratio")


def test_a_manifest_folder_or_a_table_that_is_not_a_manifest_says_what_to_pass(photos, files):
    tmp_path, _ = photos
    fails_cleanly("train", "--manifest", tmp_path / "ds", "--relevance", files_truth(tmp_path), "--out",
                  tmp_path / "run", expect=f"pass {tmp_path / 'ds' / 'manifest.parquet'}")
    (files / "notes.csv").write_text("image,label\na.png,cat\n")
    fails_cleanly("train", "--manifest", files / "notes.csv", "--relevance", files / "truth.csv", "--out",
                  files / "run", expect="`mavias data import` writes one")


def test_training_without_tags_says_where_they_come_from(photos):
    tmp_path, _ = photos
    fails_cleanly("train", "--manifest", tmp_path / "ds" / "manifest.parquet", "--relevance", files_truth(tmp_path),
                  "--out", tmp_path / "run", expect="has no 'tags' column and no tags table was given: pass the tags "
                  "that `mavias discover` printed (--tags")  # fmt: skip


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has the CUDA device asked for")
def test_a_device_this_machine_lacks_is_refused_before_the_images_are_read(photos):
    tmp_path, _ = photos
    result = fails_cleanly("train", "--manifest", tmp_path / "ds" / "manifest.parquet", "--relevance",
                           files_truth(tmp_path), "--out", tmp_path / "run", "--set", "device=cuda",
                           expect="no CUDA device is available")
    assert "loading" not in result.output


def test_an_unknown_judge_is_refused_before_any_work(photos):
    tmp_path, _ = photos
    fails_cleanly("audit", tmp_path / "photos", "--out", tmp_path / "audit", "--judge", "bogus",
                  expect="unknown judge 'bogus'")
    assert not (tmp_path / "audit").exists()


def files_truth(tmp_path):
    path = tmp_path / "truth.csv"
    path.write_text("class,tag,relevant,source\ncat,grass,false,gt\ndog,grass,false,gt\n")
    return path


def test_a_run_that_is_not_a_reference_is_refused_before_the_data_is_read(tmp_path):
    run = tmp_path / "run"
    save_config(TrainConfig(method="mavias"), run / "config.yaml")
    (run / "best_val_robust.pt").write_bytes(b"")
    (tmp_path / "manifest.csv").write_text("sample_id,uri,label,split\na,missing.png,car,train\n")
    fails_cleanly("evaluate", "--run", run, "--reference", run, "--manifest", tmp_path / "manifest.csv",
                  "--relevance", files_truth(tmp_path),
                  expect=f"{run} is a mavias run; the reference must be an ERM run")


def test_discover_without_cached_weights_names_every_way_forward(photos):
    tmp_path, _ = photos
    result = fails_cleanly("discover", "--partition", tmp_path / "ds", "--workspace", tmp_path / "ws",
                           "--weights-dir", tmp_path / "no-weights", expect="are not in the local cache")
    for fix in ("--allow-download", "--tagger-model ViT-L-14-quickgelu --pretrained /path/to/checkpoint",
                "--tags tags.csv", "--pretrained none"):  # the flags the commands have
        assert fix in " ".join(result.output.split())


def test_the_registry_without_s3_settings_names_where_to_set_them(monkeypatch):
    for name in [n for n in os.environ if n.startswith("MAVIAS_S3_")]:
        monkeypatch.delenv(name)
    result = fails_cleanly("registry", "list", "--name", "m", expect="invalid S3 settings: bucket: Field required")
    assert "MAVIAS_S3_BUCKET" in result.output and "--set" not in result.output


def test_the_registry_without_credentials_says_which_variables_give_them(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith(("AWS_", "MAVIAS_S3_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("MAVIAS_S3_BUCKET", "models")
    monkeypatch.setenv("MAVIAS_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    result = fails_cleanly("registry", "list", "--name", "m", expect="no credentials for the object store")
    assert "MAVIAS_S3_ACCESS_KEY_ID" in result.output


@pytest.mark.parametrize(("folders", "expect"), [({"cat": 6}, "only class 'cat' in the training split; a classifier "
                                                   "needs at least 2 classes"),
                                                  ({"cat": 1, "dog": 1}, "has no validation image")])
def test_a_folder_too_small_to_train_on_says_what_to_add(tmp_path, folders, expect):
    root = write_imagefolder(tmp_path / "photos", folders)
    imported = runner.invoke(app, ["data", "import", "imagefolder", str(root), "--out", str(tmp_path / "ds")],
                             env={"COLUMNS": "300"})
    assert imported.exit_code == 0, imported.output
    assert len(folders) > 1 or "only 1 class ('cat'): a classifier needs at least 2" in imported.output
    manifest = pd.read_parquet(tmp_path / "ds" / "manifest.parquet")
    pd.DataFrame({"sample_id": manifest["sample_id"], "tag": "grass", "score": 1.0}).to_parquet(tmp_path / "tags.pq")
    fails_cleanly("train", "--manifest", tmp_path / "ds" / "manifest.parquet", "--relevance", files_truth(tmp_path),
                  "--tags", tmp_path / "tags.pq", "--out", tmp_path / "run", expect=expect)


def test_a_file_that_is_not_a_tags_table(photos):
    tmp_path, _ = photos
    fails_cleanly("train", "--manifest", tmp_path / "ds" / "manifest.parquet", "--relevance", files_truth(tmp_path),
                  "--tags", tmp_path / "ds" / "manifest.parquet", "--out", tmp_path / "run",
                  expect="is not a tags table: it lacks the column(s) tag, score")


@pytest.mark.parametrize("tags", ["tags.csv", "no-such.parquet", "."])
def test_a_tags_table_that_cannot_be_read_is_named(photos, tags):
    tmp_path, _ = photos
    (tmp_path / "tags.csv").write_text("sample_id,tag,score\na,grass,1.0\n")
    expect = {"tags.csv": "cannot be read as Parquet", "no-such.parquet": "does not exist", ".": "is a folder"}[tags]
    fails_cleanly("train", "--manifest", tmp_path / "ds" / "manifest.parquet", "--relevance", files_truth(tmp_path),
                  "--tags", tmp_path / tags, "--out", tmp_path / "run", expect=expect)


def test_an_output_inside_a_file_is_refused_before_any_work(files):
    result = runner.invoke(app, ["judge", "export-review", str(files / "truth.csv"), "--out",
                                 str(files / "notes.txt" / "review.yaml")], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "notes.txt is a file, so" in result.output and "choose another path" in result.output


@pytest.mark.parametrize("command", [
    ["tag", "--manifest", "{files}/manifest.csv", "--tagger", "manifest", "--out", "{files}/notes.txt"],
    ["encode", "--manifest", "{files}/manifest.csv", "--relevance", "{files}/truth.csv", "--workspace",
     "{files}/notes.txt"],
    ["discover", "--partition", "{files}/manifest.csv", "--workspace", "{files}/notes.txt"],
])
def test_an_output_folder_that_is_a_file_is_refused_before_any_work(files, command):
    fails_cleanly(*(arg.format(files=files) for arg in command), expect="notes.txt is a file; name a folder")


def test_a_discovery_under_a_name_that_leaves_the_workspace_or_takes_another_partitions_place_is_refused(tmp_path):
    for name in ("a", "b"):
        images = write_imagefolder(tmp_path / name / "imgs", {"cat": 3, "dog": 3}, size=16)
        sidecar = "image,tags\n" + "".join(f"{p.relative_to(images).as_posix()},{name};grass\n"
                                             for p in sorted(images.rglob("*.*")))
        (tmp_path / name / "tags.csv").write_text(sidecar)
        result = runner.invoke(app, ["data", "import", "imagefolder", str(images), "--out",
                                     str(tmp_path / name / "part"), "--tags", str(tmp_path / name / "tags.csv")])
        assert result.exit_code == 0, result.output
    discover = ["discover", "--workspace", str(tmp_path / "ws"), "--tagger", "manifest", "--partition"]
    fails_cleanly(*discover, tmp_path / "a" / "part", "--name", "../../x", expect="cannot name a folder")
    assert runner.invoke(app, [*discover, str(tmp_path / "a" / "part")]).exit_code == 0
    fails_cleanly(*discover, tmp_path / "b" / "part", expect="pass --name")  # both folders are named 'part'
    assert runner.invoke(app, [*discover, str(tmp_path / "b" / "part"), "--name", "b"]).exit_code == 0
    assert runner.invoke(app, [*discover, str(tmp_path / "a" / "part")]).exit_code == 0  # its own again


def test_a_tags_store_that_does_not_exist_is_refused(files):
    fails_cleanly("tag", "--manifest", files / "manifest.csv", "--tagger", "manifest", "--out", files / "t",
                  "--store", files / "no-store", expect="does not exist")


@pytest.mark.parametrize(("error", "expect"), [
    (PermissionError(13, "Permission denied", "/srv/out"), "/srv/out cannot be used: permission denied"),
    (FileExistsError(17, "File exists", "photos/cat/0.png"), "photos/cat/0.png already exists and is in the way"),
])
def test_a_path_the_system_refuses_is_a_readable_mistake(error, expect):
    from mavias.errors import as_user_error

    assert str(as_user_error(error)).startswith(expect)


@pytest.mark.parametrize(("args", "expect"), [
    (["--shard", "3/2"], "shards count from 0"),
    (["--shard", "abc"], "--shard must look like i/n"),
    (["--num-shards", "0"], "Invalid value for '--num-shards'"),
    (["--batch-size", "0"], "Invalid value for '--batch-size'"),
    (["--device", "gpu"], "unknown device 'gpu'; use auto (a GPU when present), cpu, cuda or cuda:N"),
])
def test_bad_tagging_options_are_named(photos, args, expect):
    tmp_path, _ = photos
    result = runner.invoke(app, ["tag", "--manifest", str(tmp_path / "ds" / "manifest.parquet"), "--out",
                                 str(tmp_path / "tags"), "--tagger", "manifest", *args], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert expect in " ".join(result.output.replace("│", " ").split())


def test_a_manifest_tagger_without_tags_says_where_tags_come_from(photos):
    tmp_path, _ = photos
    fails_cleanly("tag", "--manifest", tmp_path / "ds" / "manifest.parquet", "--out", tmp_path / "tags",
                  "--tagger", "manifest", expect="the manifest has no 'tags' column; use an image tagger")


@pytest.mark.parametrize("column", ["label", "uri"])
def test_a_manifest_with_a_missing_value_names_the_column(tmp_path, column):
    manifest = pd.DataFrame({"sample_id": ["a", "b"], "uri": ["1.png", "2.png"], "label": ["cat", "dog"],
                             "split": ["train", "val"]})
    manifest.loc[0, column] = None
    manifest.to_parquet(tmp_path / "manifest.parquet")
    fails_cleanly("train", "--manifest", tmp_path / "manifest.parquet", "--relevance", files_truth(tmp_path),
                  "--out", tmp_path / "run", expect=f"1 row(s) with an empty '{column}'")


def test_a_file_that_is_not_a_checkpoint_is_named_without_torchs_advice(files):
    result = fails_cleanly("export", "--checkpoint", files / "notes.txt", "--out", files / "served" / "model.onnx",
                           expect="notes.txt is not a checkpoint written by `mavias train`")
    assert "weights_only" not in result.output


def test_an_s3_endpoint_without_its_scheme_is_named(monkeypatch):
    monkeypatch.setenv("MAVIAS_S3_BUCKET", "models")
    monkeypatch.setenv("MAVIAS_S3_ENDPOINT_URL", "localhost:9000")
    fails_cleanly("registry", "list", "--name", "m", expect="endpoint_url: Value error, must be a URL with its scheme")


@pytest.fixture
def tagged(photos):
    """The imported photos with one tag on every image, decided irrelevant to every class."""
    tmp_path, _ = photos
    manifest = pd.read_parquet(tmp_path / "ds" / "manifest.parquet")
    pd.DataFrame({"sample_id": manifest["sample_id"], "tag": "grass", "score": 1.0}).to_parquet(tmp_path / "tags.pq")
    (tmp_path / "truth.csv").write_text("class,tag,relevant,source\n" + "".join(f"{c},grass,false,gt\n"
                                                                              for c in ("cat", "dog", "owl")))
    return tmp_path


@pytest.mark.parametrize(("args", "expect"), [
    (["--group-attrs", "attr_bg"], "has no column(s) attr_bg for --group-attrs"),
    (["--set", "selection=val_tag_wg"], "selection val_tag_wg needs the ERM reference"),
])
def test_training_settings_the_data_cannot_serve_are_named(tagged, args, expect):
    fails_cleanly("train", "--manifest", tagged / "ds" / "manifest.parquet", "--relevance", tagged / "truth.csv",
                  "--tags", tagged / "tags.pq", "--out", tagged / "run", "--set", "epochs=1", *args, expect=expect)


def test_discovering_a_folder_of_images_says_to_import_it_first(tmp_path):
    root = write_imagefolder(tmp_path / "photos", {"cat": 2, "dog": 2})
    fails_cleanly("discover", "--partition", root, "--workspace", tmp_path / "ws",
                  expect=f"{root} has no manifest.parquet: discovery reads an imported partition; import the images "
                  f"first (mavias data import imagefolder {root} --out DIR)")


def test_an_image_left_out_of_training_is_said_with_where_the_reason_is(tagged):
    manifest = pd.read_parquet(tagged / "ds" / "manifest.parquet")
    (tagged / "photos" / manifest["uri"].iloc[0]).unlink()
    result = runner.invoke(app, ["train", "--manifest", str(tagged / "ds" / "manifest.parquet"), "--relevance",
                                 str(tagged / "truth.csv"), "--tags", str(tagged / "tags.pq"), "--out",
                                 str(tagged / "run"), "--set", "method=erm", "--set", "epochs=1", "--set",
                                 "image_size=16", "--set", "backbone.width=4", "--set", "optim.lr=0.01"])
    assert result.exit_code == 0, result.output
    assert f"1 image(s) left out, missing or unreadable: {tagged / 'run' / 'quarantine.csv'}" in " ".join(
        result.output.split())


def test_judging_no_class_is_refused(tmp_path):
    fails_cleanly("judge", "run", "--classes", ",,,", "--no-cache", "--out", tmp_path / "r.parquet",
                  expect="--classes ',,,' names no class")
    assert not (tmp_path / "r.parquet").exists()


def test_a_tags_table_of_other_images_is_named_not_taken_as_no_tags(photos):
    tmp_path, _ = photos
    pd.DataFrame({"sample_id": ["elsewhere"], "tag": ["grass"], "score": [1.0]}).to_parquet(tmp_path / "tags.pq")
    fails_cleanly("encode", "--manifest", tmp_path / "ds" / "manifest.parquet", "--relevance", files_truth(tmp_path),
                  "--tags", tmp_path / "tags.pq", "--workspace", tmp_path / "ws",
                  expect="no image of the manifest is in the tags table")


def test_an_unknown_openclip_architecture_names_the_closest(photos):
    tmp_path, _ = photos
    fails_cleanly("tag", "--manifest", tmp_path / "ds" / "manifest.parquet", "--out", tmp_path / "tags",
                  "--tagger", "openclip", "--tagger-model", "ViT-L/14", "--pretrained", "none", "--device", "cpu",
                  expect="'ViT-L/14' is not an OpenCLIP architecture (closest: ViT-L-14")


def test_an_unknown_encoder_spec(photos):
    tmp_path, _ = photos
    fails_cleanly("encode", "--manifest", tmp_path / "ds" / "manifest.parquet", "--relevance", files_truth(tmp_path),
                  "--encoder", "openclip-seperate:ViT-S-32/none",
                  expect="encoder 'openclip-seperate:ViT-S-32/none' is not a text encoder spec")


def test_a_damaged_stack_record_is_named_not_parsed(tmp_path):
    (tmp_path / "mavias-stack.json").write_text("{")
    fails_cleanly("airflow", "down", "--home", tmp_path,
                  expect="mavias-stack.json is not a record of `mavias airflow up`")


def test_a_prediction_of_other_classes_says_which_classes_it_lacks(files):
    (files / "predicted.csv").write_text("class,tag,relevant,source\ndog,grass,false,judge\n")
    fails_cleanly("judge", "eval", "--truth", files / "truth.csv", "--predicted", files / "predicted.csv",
                  expect="2 ground-truth pair(s) have no prediction, e.g. [['car', 'wheel'], ['car', 'road']]; the "
                  "predicted table has no class car")


def test_a_dataset_root_that_does_not_exist_is_named(tmp_path):
    result = runner.invoke(app, ["data", "import", "waterbirds", str(tmp_path / "nowhere"), "--out",
                                 str(tmp_path / "ds")], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "nowhere' does not exist" in result.output


@pytest.mark.parametrize(("content", "expect"), [
    (b"", "cannot be read as CSV (No columns to parse from file)"),
    (b"\x8c\x00\xff binary", "cannot be read as CSV ('utf-8' codec can't decode"),
])
def test_a_csv_table_that_is_empty_or_not_text_is_named(files, content, expect):
    (files / "bad.csv").write_bytes(content)
    fails_cleanly("judge", "export-review", files / "bad.csv", "--out", files / "r.yaml", expect=expect)
    fails_cleanly("judge", "eval", "--truth", files / "bad.csv", expect=expect)


def test_a_config_or_vocabulary_that_is_not_text_is_named(files):
    (files / "binary.yaml").write_bytes(b"\x97\x00\xff")
    fails_cleanly("registry", "list", "--name", "m", "--config", files / "binary.yaml", expect="is not UTF-8 text")
    fails_cleanly("judge", "run", "--classes", "car,bird", "--vocabulary", files / "binary.yaml", "--out",
                  files / "rel.parquet", expect="vocabulary")


@pytest.mark.parametrize("cache", ["truth.csv", "."])
def test_a_judge_cache_that_is_not_a_database_is_named(files, cache):
    fails_cleanly("judge", "run", "--classes", "car,bird", "--cache", files / cache, "--out", files / "rel.parquet",
                  expect=f"judge cache {files / cache} cannot be used")


@pytest.mark.parametrize("option", [["--timeout", "-1"], ["--max-retries", "-3"]])
def test_llm_limits_out_of_range_are_refused(files, option):
    result = runner.invoke(app, ["judge", "run", "--classes", "car,bird", "--judge", "llm", *option],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 2 and f"Invalid value for '{option[0]}'" in result.output, result.output


def test_an_output_file_where_a_folder_stands_is_refused_before_any_work(files):
    result = runner.invoke(app, ["judge", "export-review", str(files / "truth.csv"), "--out", str(files)],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "is a folder; name the file to write" in result.output, result.output


def test_a_refused_write_names_the_file_asked_for_not_its_temporary_sibling(tmp_path):
    from mavias.errors import as_user_error
    from mavias.utils.atomic import atomic_path

    with pytest.raises(PermissionError) as raised, atomic_path(tmp_path / "out.parquet") as tmp:
        raise PermissionError(13, f"Failed to open local file '{tmp}'")  # as pyarrow raises it: no filename
    assert str(as_user_error(raised.value)).startswith(f"{tmp_path / 'out.parquet'} cannot be used: permission denied")


def test_one_trial_is_refused_with_what_a_search_needs(files):
    fails_cleanly("tune", "--manifest", files / "manifest.csv", "--relevance", files / "truth.csv", "--out",
                  files / "search", "--trials", "1", expect="--trials 1 cannot search")


def test_a_model_name_the_registry_would_refuse_is_refused_before_the_audit(files):
    result = runner.invoke(app, ["audit", str(files), "--out", str(files / "audit"), "--name", "../x"],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "invalid model name '../x'" in result.output, result.output
    assert not (files / "audit").exists()
