"""Faults, each as a real night: `airflow dags test` of the nightly DAG against moto_server behind a fault-injecting
proxy and an SMTP server, one night after another in one deployment. Each test checks one fault's night; the table of
them all (fault, night outcome, report sent, data lost) is printed at the end (`pytest -s`) and recorded in
BENCHMARKS.md.

Data lost: an uploaded image that is neither trained on, nor held back with its reason (a quarantined row or
partition), nor waiting in incoming/ for a later night; and no object of incoming/ may disappear.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mavias.ops.nightly.incoming import ProcessedLedger
from mavias.storage.s3 import list_objects
from mavias.tools.demo.run import DemoData
from tests.airflow.conftest import deploy
from tests.airflow.fault_scenario import FaultNight, Scenario, print_table
from tests.airflow.harness import TEST_TRAINING
from tests.support.s3server import FaultInjectingProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # twelve nights, the first test waits for them all

GET_FAILURES, PUT_FAILURES = 6, 2  # botocore makes 5 attempts per request (S3Settings.max_attempts)
BATCH = 16
TRAINING = TEST_TRAINING | {"epochs": 2}  # the models' quality is not under test here, the nights are
RESNET_28 = TRAINING | {"backbone.name": "resnet18", "image_size": 28, "batch_size": BATCH}
PERMISSIVE_GATES = {"version": 1, "wg_source": "open_set", "min_worst_group_accuracy": None,
                    "min_group_support": None, "max_abs_bg_gap": None, "max_abs_coobj_gap": None,
                    "max_abs_both_gap": None, "must_beat_reference": False, "max_regression_vs_production": None}
REPORT_DEADLINE_S = 5
STEP_DEADLINE_S = 2.5  # below the local work of prepare_dataset (3.5-4.5 s here), above any step's wait on the store


def _run_nights(s: Scenario) -> None:
    d = s.d
    rows = s.rows(20)
    s.upload("unknown-class", rows.assign(label=["zebra", *rows["label"][1:]]))
    s.upload("empty", rows.iloc[:0])
    s.proxy.fail_next(GET_FAILURES, 503, method="GET")
    s.proxy.fail_next(PUT_FAILURES, 503, method="PUT")
    s.night("S3 503 bursts longer than botocore's retries; partitions with an unknown class and none", "step "
            "retried by Airflow; bad partitions quarantined whole, named in the report; nothing trained")

    s.upload("small", s.corrupt(s.rows(28), 2, "small"))
    s.upload("half-broken", s.corrupt(s.rows(5), 5, "half"))
    s.night("small and partial partitions: 2 of 30 images undecodable; 5 of 10 (keep_partial)",
            "both kept, their undecodable images held back with reasons",
            env={"MAVIAS_NIGHTLY__VALIDATION__KEEP_PARTIAL": "true"})

    no_boat = s.rows(70, without="boat")
    s.upload("no-boat", no_boat)
    before = s.nights[list(s.nights)[-1]].night.results["prepare_dataset"]["sizes"]["train"]
    needed = (1 - before - int((no_boat["split"] == "train").sum())) % BATCH + BATCH  # k x 16 + 1 in all
    s.upload("last-batch", s.corrupt(s.rows(needed, split="train"), 2, "batch"))
    resnet = {"MAVIAS_NIGHTLY__TRAIN__OVERRIDES": yaml.safe_dump(RESNET_28, default_flow_style=True)}
    s.night(f"a partition lacking a class; a training split of k x {BATCH} + 1 images (2 undecodable ones "
            "quarantined) on resnet18 at 28 px", "partition kept; trains with no 1-sample batch", env=resnet)
    resnet_night = s.nights[list(s.nights)[-1]]
    if "train_reference" in resnet_night.night.results:  # read now: later nights' retention deletes the folder
        reference_dir = Path(resnet_night.night.results["train_reference"]["dir"])
        resnet_night.facts["reference"] = yaml.safe_load((reference_dir / "config.yaml").read_text())

    s.upload("diverging", s.rows(20))
    diverging = {"MAVIAS_NIGHTLY__TRAIN__OVERRIDES": yaml.safe_dump(TRAINING | {"optim.lr": 1e12},
                                                                    default_flow_style=True)}
    s.night("a training error (the loss diverges)", "one line in the report, its own headline; not retried; data "
            "waits", env=diverging)

    d.client.put_object(Bucket=d.settings.bucket, Key=d.registry.pointer_key, Body=b'{"name": "scenes-te')
    s.night("a corrupt (truncated) production pointer", "promotion refused, the night fails visibly, report sent")
    d.registry.repair()

    for name in ("a..b", "odd name"):
        d.client.put_object(Bucket=d.settings.bucket, Key=f"incoming/{name}/manifest.csv", Body=b"x")
    s.proxy.stall_paths("reports", 600)
    try:
        s.night("the S3 endpoint stalls during the report; incoming folders with unsafe names", "report made and sent "
                f"within its {REPORT_DEADLINE_S} s deadline, uploaded later; the folders ignored and listed in it",
                env={"MAVIAS_NIGHTLY__REPORT__STORAGE_DEADLINE_S": str(REPORT_DEADLINE_S)})
    finally:
        s.proxy.stall_paths(None)

    s.night("a configuration error: the evaluation set is missing", "fails at once (no retries), the report names "
            "the set and how to provide it", env={"MAVIAS_NIGHTLY__EVALUATION__VERSION": "missing"})

    again = s.uploaded.loc[s.uploaded["partition"] == "no-boat", "sample_id"]  # the same images once more
    s.upload("duplicates", s.pool.set_index("sample_id").loc[again].reset_index())
    s.night("tonight's data digest equals production's", "skipped with its headline; nothing published")

    late = s.rows(20)
    s.upload("still-uploading", late)
    held = _hold_back_images(s, "still-uploading", late["uri"][:3])
    s.upload("evaluation-v1", s.rows(20))
    s.night("a manifest uploaded before 3 of its images; a partition named like the evaluation set (evaluation-v1)",
            "the first waits, named in the report; the second trains as an ordinary partition, the evaluation set's "
            "tags untouched")
    for key, body in held.items():
        d.client.put_object(Bucket=d.settings.bucket, Key=key, Body=body)
    s.withheld -= held.keys()

    s.night(f"s3.step_deadline_s {STEP_DEADLINE_S} s, shorter than the local work of some steps", "no step fails "
            "for it: the deadline counts time spent waiting on the store", env={
                "MAVIAS_S3_STEP_DEADLINE_S": str(STEP_DEADLINE_S)})

    changed = _replace_a_validated_image(s, "small")
    s.upload("after-change", s.rows(20))
    s.night("an image of a processed partition replaced in the bucket, the workspace's copy lost", "the partition "
            "is left out of training and named in the report with what to do; the rest trains")
    s.nights[list(s.nights)[-1]].facts["changed"] = changed
    d.client.put_object(Bucket=d.settings.bucket, Key=changed[0], Body=changed[1])  # restored for later checks

    broken = d.root / "broken-gates.yaml"
    broken.write_text(yaml.safe_dump(PERMISSIVE_GATES | {"min_worst_group_accuracy": 60}))  # percent, not a fraction
    s.upload("gated-by-a-broken-file", s.rows(20))
    s.night("a gates file with a threshold out of range", "quality_gates fails at once (no retries), the report says "
            "why in one line; data waits", env={"MAVIAS_NIGHTLY__GATES": str(broken)})


def _hold_back_images(s: Scenario, partition: str, uris: pd.Series) -> dict[str, bytes]:
    """Delete some of a partition's uploaded images (as if still uploading); return them by key."""
    keys = [f"incoming/{partition}/{uri}" for uri in uris]
    held = {key: s.d.client.get_object(Bucket=s.d.settings.bucket, Key=key)["Body"].read() for key in keys}
    for key in keys:
        s.d.client.delete_object(Bucket=s.d.settings.bucket, Key=key)
    s.withheld |= set(keys)
    return held


def _replace_a_validated_image(s: Scenario, partition: str) -> tuple[str, bytes]:
    """Swap one of the partition's images in the bucket for other bytes and delete the workspace's validated copy;
    return its key and its validated bytes."""
    uri = next(u for u in s.uploaded.loc[s.uploaded["partition"] == partition, "uri"] if "corrupt" not in u)
    key = f"incoming/{partition}/{uri}"
    validated = s.d.client.get_object(Bucket=s.d.settings.bucket, Key=key)["Body"].read()
    s.d.client.put_object(Bucket=s.d.settings.bucket, Key=key, Body=validated + b"appended after validation")
    (s.d.workspace / "partitions" / partition / uri).unlink()
    return key, validated


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, airflow_home: Path, moto_endpoint: str,
             scenes: DemoData) -> Iterator[Scenario]:
    proxy = FaultInjectingProxy(moto_endpoint)
    root = tmp_path_factory.mktemp("faults")
    s = None
    try:
        with deploy(root, airflow_home, proxy.endpoint_url, scenes) as d:
            gates = root / "gates.yaml"
            gates.write_text(yaml.safe_dump(PERMISSIVE_GATES))
            d.env["MAVIAS_NIGHTLY__GATES"] = str(gates)
            d.env["MAVIAS_NIGHTLY__TRAIN__OVERRIDES"] = yaml.safe_dump(TRAINING, default_flow_style=True)
            s = Scenario(d, scenes, proxy)
            _run_nights(s)
            yield s
    finally:
        proxy.stop()
        if s is not None:
            print_table(list(s.nights.values()))


def _night(scenario: Scenario, index: int) -> FaultNight:
    return list(scenario.nights.values())[index]


def _html(night: FaultNight) -> str:
    return Path(night.night.results["report"]["html"]).read_text()


def test_every_fault_night_sends_its_report_and_loses_no_data(scenario: Scenario) -> None:
    assert len(scenario.nights) == 12
    for night in scenario.nights.values():
        assert night.subject, f"{night.fault}: no report email"
        assert night.lost == [], f"{night.fault}: lost {night.lost}"
        assert night.night.state("report") == "success", night.fault


def test_s3_bursts_are_retried_and_bad_partitions_are_quarantined_whole(scenario: Scenario) -> None:
    night = _night(scenario, 0)
    assert night.night.returncode == 0, night.night.log
    assert night.night.tasks["try_number"].max() == 2  # one task outlasted botocore's retries, its retry passed
    assert scenario.proxy.failures_served >= GET_FAILURES + PUT_FAILURES
    ledger = ProcessedLedger(scenario.d.client, scenario.d.settings)
    assert {"unknown-class", "empty"} <= ledger.quarantined()
    for task_id in ("plan_tagging", "prepare_dataset", "train_reference", "promote"):
        assert night.night.state(task_id) == "skipped", task_id
    assert "data rejected (empty, unknown-class), nothing trained" in night.subject
    html = _html(night)
    for expected in ("Data rejected: 2 partition(s) failed validation", "labels_known_classes", "zebra", "non_empty",
                     "delete quarantine/unknown-class/validation.json"):
        assert expected in html, expected


def test_small_and_partial_partitions_are_kept_with_what_was_held_back(scenario: Scenario) -> None:
    night = _night(scenario, 1)
    assert night.night.returncode == 0, night.night.log
    validated = night.night.results["pull_and_validate"]
    assert sorted(validated["valid"]) == ["half-broken", "small"] and validated["failed"] == []
    sizes = night.night.results["prepare_dataset"]["sizes"]
    assert sizes["train"] + sizes["val"] == 28 + 5  # every decodable image; the 7 undecodable ones held back
    html = _html(night)
    assert "passed as a partial partition (kept 5 of 10 image(s), held back 5)" in html
    assert "within chance for 30 images" in html and html.count("cannot decode") >= 5


def test_a_partition_lacking_a_class_and_k_batches_plus_one_on_resnet18_at_28_px(scenario: Scenario) -> None:
    night = _night(scenario, 2)
    assert night.night.returncode == 0, night.night.log
    assert sorted(night.night.results["pull_and_validate"]["valid"]) == ["last-batch", "no-boat"]
    assert "lacks class(es) boat (allowed)" in _html(night)
    train = night.night.results["prepare_dataset"]["sizes"]["train"]
    assert train % BATCH == 1 and train > BATCH
    before = _night(scenario, 1).night.results["prepare_dataset"]["sizes"]["quarantined"]
    assert night.night.results["prepare_dataset"]["sizes"]["quarantined"] == before + 2
    assert night.night.state("train_reference") == "success" and night.night.state("train_mavias") == "success"
    reference = night.facts["reference"]
    assert reference["backbone"]["name"] == "resnet18" and reference["image_size"] == 28


def test_a_training_error_is_one_line_with_its_own_headline_and_is_not_retried(scenario: Scenario) -> None:
    night = _night(scenario, 3)
    tasks = night.night.tasks
    (task,) = {t for t in tasks.loc[tasks["state"] == "failed", "task_id"] if t != "finish"}
    # the reference diverges, or every trial does (each is pruned; choosing the candidate then fails)
    assert task in ("train_reference", "train_mavias") and night.night.returncode != 0
    assert tasks.loc[tasks["task_id"] == task, "try_number"].max() == 1  # a diverging rate is a mistake: no retries
    assert f"FAILED, a configuration or input mistake in {task}" in night.subject
    html = _html(night)
    assert f"FAILED: a configuration or input mistake stopped {task}" in html
    diverged = "training diverged in epoch" if task == "train_reference" else "diverged (loss NaN or infinite)"
    assert f"{task}: " in html and diverged in html and "Not promoted" not in html
    retaken = _night(scenario, 4).night.results["pull_and_validate"]["valid"]
    assert retaken == ["diverging"]  # not marked processed: the next night took it again


def test_a_corrupt_pointer_fails_the_night_visibly_and_the_report_goes_out(scenario: Scenario) -> None:
    night = _night(scenario, 4)
    assert night.night.returncode != 0 and night.night.state("finish") == "failed"
    assert night.night.state("publish") == "success" and not night.night.results["promote"]["promoted"]
    assert "FAILED, corrupt production pointer" in night.subject
    assert night.night.results["report"]["failure"].startswith("FAILED: the production pointer is corrupt")
    assert "the production pointer is corrupt" in night.night.log.read_text()
    assert "mavias registry repair --name scenes-test" in _html(night)


def test_a_stalled_bucket_costs_the_report_its_deadline_not_attempts_x_timeout(scenario: Scenario) -> None:
    night = _night(scenario, 5)
    assert night.night.returncode == 0, night.night.log
    report = night.night.tasks.loc[night.night.tasks["task_id"] == "report"]
    assert report["duration_s"].item() < 100  # without the deadline: 5 attempts x a 60 s read timeout (300 s)
    assert not night.night.results["report"]["uploaded"] and night.subject
    assert f"step's deadline of {REPORT_DEADLINE_S} s" in _html(night).replace("&#39;", "'")
    later = f"models/{scenario.d.config['model_name']}/reports/20250206T000000/attempt-1/report.html"
    keys = {o.key for o in list_objects(scenario.d.client, scenario.d.settings, later)}
    assert keys == {later}  # uploaded by the next night's report


def test_unsafe_incoming_folders_are_listed_in_the_report(scenario: Scenario) -> None:
    night = _night(scenario, 5)
    assert night.night.returncode == 0 and night.night.results["sense"]["unsafe"] == ["'a..b'", "'odd name'"]
    assert "Ignored incoming folder(s) with unsafe names" in _html(night)


def test_a_configuration_error_fails_at_once_and_says_what_to_do(scenario: Scenario) -> None:
    night = _night(scenario, 6)
    assert night.night.returncode != 0 and night.night.state("pull_and_validate") == "failed"
    assert night.night.tasks.loc[night.night.tasks["task_id"] == "pull_and_validate", "try_number"].item() == 1
    html = _html(night).replace("&#39;", "'")
    assert "FAILED: a configuration or input mistake stopped pull_and_validate" in html
    assert "evaluation set 'missing' is missing" in html and "MAVIAS_NIGHTLY__EVALUATION__VERSION" in html


def test_data_equal_to_production_is_skipped_and_nothing_is_published_again(scenario: Scenario) -> None:
    night = _night(scenario, 7)
    assert night.night.returncode == 0, night.night.log
    assert night.night.results["prepare_dataset"]["same_as_production"]
    for task_id in ("train_reference", "plan_trials", "evaluate", "publish", "promote"):
        assert night.night.state(task_id) == "skipped", task_id
    assert night.night.state("record_processed") == "success"
    assert "skipped, same data as production" in night.subject
    assert "Skipped: tonight" in _html(night).replace("&#39;", "'")


def test_a_partition_still_uploading_waits_and_one_named_like_the_evaluation_set_is_ordinary(
    scenario: Scenario,
) -> None:
    night = _night(scenario, 8)
    assert night.night.returncode == 0, night.night.log
    validated = night.night.results["pull_and_validate"]
    assert list(validated["waiting"]) == ["still-uploading"] and "3 file(s)" in validated["waiting"]["still-uploading"]
    assert "partition still-uploading is still uploading" in _html(night)
    assert "evaluation-v1" in night.night.results["prepare_dataset"]["partitions"]
    tags = scenario.d.workspace / "discovery" / "tags"
    evaluation = pd.read_parquet(tags / "_evaluation-v1" / "tags.parquet")
    assert set(evaluation["sample_id"]).isdisjoint(pd.read_parquet(tags / "evaluation-v1" / "tags.parquet")["sample_id"])
    assert "still-uploading" in _night(scenario, 9).night.results["pull_and_validate"]["valid"]  # complete: taken


def test_a_step_that_computes_longer_than_its_store_deadline_is_not_failed_for_it(scenario: Scenario) -> None:
    night = _night(scenario, 9)
    assert night.night.returncode == 0, night.night.log
    tasks = night.night.tasks
    assert tasks["try_number"].max() == 1  # nothing retried
    store_steps = tasks[tasks["task_id"].isin(["pull_and_validate", "prepare_dataset", "evaluate", "report"])]
    assert store_steps["duration_s"].max() > STEP_DEADLINE_S, store_steps


def test_a_partition_changed_after_validation_is_left_out_and_named_and_old_data_is_pruned(scenario: Scenario) -> None:
    night = _night(scenario, 10)
    assert night.night.returncode == 0, night.night.log
    dataset = night.night.results["prepare_dataset"]
    assert "small" not in dataset["partitions"] and "after-change" in dataset["partitions"]
    html = _html(night)
    assert "partition small: 1 file(s) changed or vanished in the bucket after it was validated" in html
    assert "processed/small.json" in html
    trained = scenario.d.workspace / "training"
    production = scenario.d.registry.production().version.split("-")[1]
    assert len(list(trained.iterdir())) <= 3 + 2  # the newest 3, tonight's and production's
    assert any(path.name.startswith(production) for path in trained.iterdir())
    deleted = [path for n in scenario.nights.values() if n.night.state("clean_up") == "success"
               for path in n.night.results["clean_up"]["deleted"]]
    assert any(path.startswith("training/") for path in deleted)


def test_a_broken_gates_file_fails_the_gates_at_once_with_its_line_in_the_report(scenario: Scenario) -> None:
    night = _night(scenario, 11)
    tasks = night.night.tasks
    assert night.night.returncode != 0 and night.night.state("quality_gates") == "failed"
    assert tasks.loc[tasks["task_id"] == "quality_gates", "try_number"].item() == 1  # a mistake: no retries
    html = " ".join(_html(night).split())
    assert "FAILED: a configuration or input mistake stopped quality_gates" in html
    assert "broken-gates.yaml" in html and "min_worst_group_accuracy" in html
