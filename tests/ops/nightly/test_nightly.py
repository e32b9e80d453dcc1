"""The nightly steps without Airflow: configuration, sensing and validation against a real S3 server (moto on
loopback), the training decision, the accumulated data set, and two promotions racing."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mavias.core.relevance import load_relevance
from mavias.errors import UserError
from mavias.ops.nightly import dataset, discover, ingest, release, report, tagging_plan
from mavias.ops.nightly.config import NightlyConfig, NightlyConfigError, load_nightly_config
from mavias.ops.nightly.dataset import dataset_digest
from mavias.ops.registry import ModelRegistry, VersionExists
from mavias.storage.s3 import S3Settings, get_json
from mavias.utils.disk import sha256_file
from tests.support.s3server import (  # noqa: F401 - fixtures
    moto_endpoint,
    s3_client,
    s3_settings,
    seed_partition,
    write_local_partition,
)

NIGHT = datetime(2025, 3, 1)


def write_config(path: Path, **values: object) -> Path:
    path.write_text(yaml.safe_dump({"model_name": "m", "workspace": "ws", "s3": {"bucket": "b"}} | values))
    return path


def test_config_resolves_paths_and_applies_environment_overrides(tmp_path: Path) -> None:
    path = write_config(tmp_path / "nightly.yaml", gates="gates.yaml", discovery={"review": "review.yaml"})
    environ = {
        "MAVIAS_NIGHTLY__EVALUATION__VERSION": "v7",
        "MAVIAS_NIGHTLY__REPORT__RECIPIENTS": "[a@example.com, b@example.com]",
        "MAVIAS_NIGHTLY__TRAIN__OVERRIDES": "{epochs: 3}",
        "MAVIAS_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
    }
    cfg = load_nightly_config(path, environ)
    assert cfg.workspace == tmp_path / "ws" and cfg.gates == tmp_path / "gates.yaml"
    assert cfg.discovery.review == tmp_path / "review.yaml"
    assert cfg.evaluation.version == "v7" and cfg.report.recipients == ["a@example.com", "b@example.com"]
    assert cfg.training.epochs == 3
    assert cfg.s3.endpoint_url == "http://127.0.0.1:9000"


def test_invalid_config_names_the_field_and_never_echoes_a_secret(tmp_path: Path) -> None:
    path = write_config(tmp_path / "nightly.yaml", discovery={"num_shards": 0})
    with pytest.raises(NightlyConfigError, match="discovery.num_shards") as err:
        load_nightly_config(path, {"MAVIAS_S3_SECRET_ACCESS_KEY": "hunter2", "MAVIAS_S3_MAX_ATTEMPTS": "hunter2"})
    assert "hunter2" not in str(err.value)
    with pytest.raises(NightlyConfigError, match="does not exist"):
        load_nightly_config(tmp_path / "missing.yaml", {})


def test_credentials_in_the_config_file_are_refused_and_come_from_the_environment(tmp_path: Path) -> None:
    """`mavias airflow up` builds the stack's S3 connection from the config: its credentials may come only from the
    environment, never from the file."""
    from mavias.ops.airflow_stack.stack import connections

    path = write_config(tmp_path / "nightly.yaml", s3={"bucket": "b", "secret_access_key": "hunter2"})
    with pytest.raises(NightlyConfigError, match=r"holds credentials \(s3.secret_access_key\): remove them") as err:
        load_nightly_config(path, {})
    assert "hunter2" not in str(err.value)
    clean = write_config(tmp_path / "clean.yaml", s3={"bucket": "b", "endpoint_url": "http://127.0.0.1:9"})
    bare = json.loads(connections(load_nightly_config(clean, {}), 8080, None)["AIRFLOW_CONN_AWS_DEFAULT"])
    assert "login" not in bare and "password" not in bare  # the tasks use the AWS chain of their environment
    environ = {"MAVIAS_S3_ACCESS_KEY_ID": "id-from-env", "MAVIAS_S3_SECRET_ACCESS_KEY": "secret-from-env"}
    aws = json.loads(connections(load_nightly_config(clean, environ), 8080, None)["AIRFLOW_CONN_AWS_DEFAULT"])
    assert (aws["login"], aws["password"]) == ("id-from-env", "secret-from-env")
    assert aws["extra"]["endpoint_url"] == "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("validated", "full_retrain", "expected"),
    [
        ({"failed": ["p2"], "valid": ["p1"], "partitions": ["p1"]}, False, (False, "failed validation")),
        ({"failed": [], "valid": [], "partitions": []}, True, (False, "no partition")),
        ({"failed": [], "valid": [], "partitions": ["p1"]}, False, (False, "no new partitions")),
        ({"failed": [], "valid": [], "partitions": ["p1"]}, True, (True, "full retrain")),
        ({"failed": [], "valid": ["p2"], "partitions": ["p1", "p2"]}, False, (True, "p2")),
    ],
)
def test_training_decision(validated: dict, full_retrain: bool, expected: tuple[bool, str]) -> None:
    go, why = ingest.training_decision(validated, full_retrain=full_retrain)
    assert (go, expected[1] in why) == (expected[0], True)


def _manifest(folder: Path, rows: list[tuple[str, str, str]]) -> Path:
    folder.mkdir(parents=True)
    frame = pd.DataFrame(rows, columns=["sample_id", "label", "split"]).assign(uri=lambda f: f["sample_id"] + ".png")
    frame.to_parquet(folder / "manifest.parquet")
    return folder / "manifest.parquet"


def test_accumulated_manifest_unions_partitions_and_keeps_the_evaluation_set_out_of_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _manifest(tmp_path / "p1", [("a", "car", "train"), ("b", "boat", "val"), ("e", "car", "train")])
    second = _manifest(tmp_path / "p2", [("a", "car", "train"), ("c", "bird", "train"), ("x", "car", "test")])
    evaluation = _manifest(tmp_path / "eval", [("e", "car", "test"), ("f", "bird", "test")])
    with caplog.at_level("WARNING"):
        frame = dataset.accumulated_manifest([first, second], evaluation).set_index("sample_id")
    assert "1 training image(s) share a sample_id with an evaluation image" in caplog.text  # every left-out row said
    assert f"1 training image(s) repeat the sample_id of an earlier partition's image (the first kept; a producer " \
           f"must give each image its own id) (e.g. {tmp_path / 'p2' / 'a.png'})" in caplog.text
    assert frame["split"].to_dict() == {"a": "train", "b": "val", "c": "train", "e": "test", "f": "test"}
    assert frame.loc["c", "uri"] == str(tmp_path / "p2" / "c.png")
    dataset.check_trainable(frame.reset_index())
    no_bird = dataset.accumulated_manifest([first], evaluation)
    with pytest.raises(UserError, match="no image of class\\(es\\) bird, which the evaluation set has"):
        dataset.check_trainable(no_bird)


def test_an_evaluation_image_under_another_name_never_trains(tmp_path: Path) -> None:
    partition = _manifest(tmp_path / "p1", [("a", "car", "train"), ("copy", "car", "train")])
    evaluation = _manifest(tmp_path / "eval", [("e", "car", "test")])
    (tmp_path / "p1" / "a.png").write_bytes(b"a training image")
    (tmp_path / "eval" / "e.png").write_bytes(b"an evaluation image")
    (tmp_path / "p1" / "copy.png").write_bytes(b"an evaluation image")  # its bytes, a new sample_id and file name
    frame = dataset.accumulated_manifest([partition], evaluation)
    assert frame.set_index("sample_id")["split"].to_dict() == {"a": "train", "e": "test"}


def _config(settings: S3Settings, workspace: Path) -> NightlyConfig:
    return NightlyConfig(model_name="m", s3=settings, workspace=workspace)


def test_sense_and_validate_quarantine_a_bad_partition_and_pass_a_good_one(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001 - boto3 client
) -> None:
    seed_partition(s3_client, s3_settings.model_copy(update={"incoming_prefix": "evaluation/"}), "v1",
                   ["car", "boat", "bird"])
    seed_partition(s3_client, s3_settings, "good", ["car", "boat", "bird", "car"])
    seed_partition(s3_client, s3_settings, "bad", ["car", "zebra"])
    cfg = _config(s3_settings, tmp_path)
    sensed = ingest.sense(cfg, NIGHT)
    assert sensed["new"] == ["bad", "good"] and sensed["night"] == "20250301T000000"
    validated = ingest.pull_and_validate(cfg, sensed)
    assert (validated["valid"], validated["failed"], validated["classes"]) == (["good"], ["bad"], ["bird", "boat", "car"])
    record, _ = get_json(s3_client, s3_settings, "quarantine/bad/validation.json")
    assert "labels_known_classes" in record["failed"]
    assert ingest.sense(cfg, NIGHT)["new"] == ["good"]  # quarantined partitions are not sensed again
    assert ingest.sense(cfg, NIGHT, force_partition="bad")["new"] == ["bad", "good"]
    with pytest.raises(UserError, match="no manifest"):
        ingest.sense(cfg, NIGHT, force_partition="nowhere")


def test_two_racing_promotions_exactly_one_wins(s3_client, s3_settings: S3Settings, tmp_path: Path) -> None:  # noqa: ANN001
    registry = ModelRegistry(s3_client, s3_settings, "m")
    for version in ("night-a", "night-b"):
        write_local_partition(tmp_path / version, ["car"])
        registry.publish_version(tmp_path / version, version)
    cfg = _config(s3_settings, tmp_path)
    evaluated = {"production_etag": None, "production_version": None}  # both evaluated against "no production"
    results: list[dict] = []
    barrier = threading.Barrier(2)

    def promote(version: str) -> None:
        barrier.wait()
        results.append(release.promote(cfg, {"version": version, "uri": registry.version_uri(version)}, evaluated))

    threads = [threading.Thread(target=promote, args=(v,)) for v in ("night-a", "night-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [r["version"] for r in results if r["promoted"]]
    assert len(winners) == 1
    assert [r.version for r in registry.history()] == winners
    (loser,) = [r for r in results if not r["promoted"]]
    assert "concurrent" in loser["reason"]


def test_a_night_stopped_before_its_report_is_named_by_the_next_report_once(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg = NightlyConfig(model_name="m", s3=s3_settings, workspace=tmp_path / "ws")

    def reported(day: int) -> str:
        sensed = ingest.sense(cfg, datetime(2025, 3, day))
        html = report.report(cfg, {"sensed": sensed}, trained=False, decision="nothing new")["html"]
        return " ".join(Path(html).read_text().split())

    reported(1)
    ingest.sense(cfg, datetime(2025, 3, 2))  # the run timed out: Airflow skipped its report
    ingest.sense(cfg, datetime(2025, 3, 3))  # and so did the next one's
    (tmp_path / "ws" / "nights" / ".snapshot").mkdir()  # a volume's own folder beside the nights
    second = reported(4)
    assert "The night(s) 20250302T000000, 20250303T000000 started but sent no report" in second
    assert "airflow.dagrun_timeout_h = 20 h" in second and "20250301T000000" not in second
    assert "sent no report" not in reported(5)  # said once: the nights since the last report


def _version_folder(root: Path, onnx: bytes) -> dict:
    """A packaged version folder: its ONNX file and a card naming its sha256."""
    root.mkdir(parents=True)
    (root / "model.onnx").write_bytes(onnx)
    sha = sha256_file(root / "model.onnx")
    (root / "model_card.json").write_text(json.dumps({"onnx": {"file": "model.onnx", "sha256": sha}}))
    return {"version": "20250301T000000-abcdef12", "dir": str(root), "onnx_sha256": sha}


def test_a_rerun_publishes_nothing_twice_and_refuses_a_candidate_trained_again_under_a_published_version(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    cfg = NightlyConfig(model_name="m", s3=s3_settings, workspace=tmp_path / "ws")
    first = _version_folder(tmp_path / "first", b"graph one")
    assert release.publish(cfg, first)["version"] == first["version"]
    assert release.publish(cfg, first)["uri"].endswith(f"/{first['version']}/")  # the rerun finds it published
    retrained = _version_folder(tmp_path / "retrained", b"graph two")
    with pytest.raises(VersionExists, match="published before from another model") as raised:
        release.publish(cfg, retrained)
    assert f"mavias registry promote {first['version']} --name m" in str(raised.value)


def test_images_tagged_counts_each_shard_once_whatever_results_an_earlier_try_left() -> None:
    def shard(partition: str, index: int, images: int) -> dict:
        return {"partition": partition, "shard": index, "images_tagged": images, "images_reused": 0,
                "images_quarantined": 0, "shards_done": 1}

    earlier_try = [[shard("p1", 0, 5)], [shard("p1", 1, 4)]]
    tonight = [[shard("p1", 0, 0), shard("p2", 0, 3)]]  # p1 shard 0 committed by the earlier try: nothing to tag
    assert discover.images_tagged(earlier_try + tonight) == 5 + 4 + 3


def test_a_backlog_of_shards_is_dealt_into_no_more_tasks_than_airflow_maps() -> None:
    jobs = [{"partition": f"p{i // 8}", "manifest": "m", "shard": i % 8, "num_shards": 8} for i in range(2000)]
    batches = tagging_plan.deal(jobs, tagging_plan.MAX_MAPPED_TASKS)
    assert len(batches) == 1024 and sorted(map(len, batches))[::1023] == [1, 2]  # Airflow's max_map_length
    assert sorted((j["partition"], j["shard"]) for b in batches for j in b) == sorted((j["partition"], j["shard"])
                                                                                    for j in jobs)  # each once
    assert tagging_plan.deal(jobs[:3], 1024) == [[job] for job in jobs[:3]] and tagging_plan.deal([], 1024) == []


def _judge_night(cfg: NightlyConfig, when: datetime) -> dict:
    """sense -> pull + validate -> discover (manifest tags, offline judge) -> prepare_dataset, as the DAG runs them."""
    validated = ingest.pull_and_validate(cfg, ingest.sense(cfg, when))
    discover.discover(cfg, validated, None)
    return {"validated": validated, "dataset": dataset.prepare_dataset(cfg, validated)}


@pytest.mark.slow
def test_the_report_lists_the_relevance_decisions_changed_since_the_previous_night(
    s3_client, s3_settings: S3Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture  # noqa: ANN001
) -> None:
    labels, tags = ["car"] * 3, [["wheel", "road"], ["road", "sky"], ["wheel"]]  # one class: the judge costs most
    seed_partition(s3_client, s3_settings.model_copy(update={"incoming_prefix": "evaluation/"}), "v1", labels,
                   tags=tags)
    seed_partition(s3_client, s3_settings, "p1", labels, tags=tags)
    cfg = NightlyConfig(model_name="m", s3=s3_settings, workspace=tmp_path / "ws", discovery={"num_shards": 1})
    first = _judge_night(cfg, datetime(2025, 3, 1))
    changes = json.loads(Path(first["dataset"]["relevance_changes"]).read_text())
    assert (changes["previous_night"], changes["classes"]) == (None, {})
    decoded_first = {path: path.stat().st_mtime_ns for path in (tmp_path / "ws" / "decoded").rglob("*.pt")}
    assert {path.name for path in decoded_first} == {"partitions__p1.pt", "evaluation__v1.pt"}

    # The reviewer flips one of last night's decisions; a new partition brings a tag never seen before.
    decided = load_relevance(changes["relevance"]).set_index(["class", "tag"])["relevant"]
    flipped = bool(decided["car", "road"])
    review = tmp_path / "review.yaml"
    review.write_text(yaml.safe_dump({"version": 1, "decisions": {
        "car": {"irrelevant" if flipped else "relevant": ["road", "raod"]}}}))
    seed_partition(s3_client, s3_settings, "p2", ["car", "car"], tags=[["road", "traffic light"], ["wheel"]])
    second_cfg = cfg.model_copy(update={"discovery": cfg.discovery.model_copy(update={"review": review})})
    second = _judge_night(second_cfg, datetime(2025, 3, 2))
    assert "1 tag(s) their class does not have (car: raod)" in caplog.text  # a typo decides nothing: said
    path = Path(second["dataset"]["relevance_changes"])
    decoded_second = {path: path.stat().st_mtime_ns for path in (tmp_path / "ws" / "decoded").rglob("*.pt")}
    assert {path.name for path in set(decoded_second) - set(decoded_first)} == {"partitions__p2.pt"}
    assert [p.name for p, stamp in decoded_first.items() if decoded_second[p] != stamp] == []  # decoded once
    recorded = json.loads(path.read_text())
    assert recorded["previous_night"] == "20250301T000000" and list(recorded["classes"]) == ["car"]
    car = recorded["classes"]["car"]
    assert car["became_irrelevant" if flipped else "became_relevant"] == ["road"]
    assert car["new_relevant"] + car["new_irrelevant"] == ["traffic light"]
    trained_on = load_relevance(Path(second["dataset"]["dir"]) / "dataset" / "relevance.parquet")
    assert trained_on.set_index("tag").loc["road", ["relevant", "source"]].tolist() == [not flipped, "review"]
    assert dataset.prepare_dataset(second_cfg, second["validated"])["relevance_changes"] == str(path)
    assert json.loads(path.read_text()) == recorded  # a rerun of the night records the same changes

    sensed = ingest.night_info(datetime(2025, 3, 2))
    result = report.report(second_cfg, {"sensed": sensed, **second}, trained=False, decision="report only")
    html = Path(result["html"]).read_text()
    section = html[html.index("Relevance decisions changed"):html.index("Main-model logits")]
    assert "road" in section and "traffic light" in section and f"edit {review}" in section


def test_the_digest_changes_with_the_bytes_of_the_files_that_train_and_only_theirs(tmp_path: Path) -> None:
    cfg = _config(S3Settings(bucket="b"), tmp_path)
    rows = pd.DataFrame({"sample_id": ["a", "b"], "label": ["car", "boat"], "split": ["train", "test"],
                         "uri": ["/ws/partitions/p1/a.png", "/ws/evaluation/v1/b.png"]})
    tags, decisions = pd.DataFrame(columns=["sample_id", "tag"]), pd.DataFrame(columns=["class", "tag", "relevant"])
    etags = {"/ws/partitions/p1/a.png": '"e1"', "/ws/evaluation/v1/b.png": '"e2"'}
    digest = dataset_digest(cfg, rows, tags, decisions, etags)
    assert dataset_digest(cfg, rows, tags, decisions, etags | {"/ws/partitions/copy/a.png": '"e1"'}) == digest
    assert dataset_digest(cfg, rows, tags, decisions, etags | {"/ws/partitions/p1/a.png": '"e9"'}) != digest


def test_a_promote_retried_after_its_first_try_moved_the_pointer_is_the_nights_promotion(
    s3_client, s3_settings: S3Settings, tmp_path: Path  # noqa: ANN001
) -> None:
    registry = ModelRegistry(s3_client, s3_settings, "m")
    for version in ("night-a", "night-b"):
        write_local_partition(tmp_path / version, ["car"])
        registry.publish_version(tmp_path / version, version)
    cfg = _config(s3_settings, tmp_path)
    release.promote(cfg, {"version": "night-a", "uri": registry.version_uri("night-a")},
                    {"production_etag": None, "production_version": None})
    evaluated = {"production_etag": registry.production_and_etag()[1], "production_version": "night-a"}
    published = {"version": "night-b", "uri": registry.version_uri("night-b")}
    first = release.promote(cfg, published, evaluated)  # its task killed after this: Airflow retries it
    retry = release.promote(cfg, published, evaluated)
    assert first["promoted"] and retry["promoted"] and retry["previous"] == "night-a" and not retry["reason"]
    rerun = release.promote(cfg, published, {"production_etag": registry.production_and_etag()[1],
                                             "production_version": "night-b"})  # the whole night again
    assert not rerun["promoted"] and "already in production (rerun)" in rerun["reason"] and rerun["in_production"]
    assert [r.version for r in registry.history()] == ["night-a", "night-b"]


@pytest.mark.parametrize("uri", [".validated-etags.json", "img/.pulled-etags.json", "manifest.parquet",
                                 ".hidden/a.png"])
def test_a_manifest_naming_the_pulls_own_files_is_refused(tmp_path: Path, uri: str) -> None:
    from mavias.core.manifest import ManifestError
    from mavias.ops.nightly.pull import referenced_files

    path = tmp_path / "manifest.parquet"
    pd.DataFrame({"sample_id": ["a", "b"], "uri": ["img/a.png", uri], "label": ["car"] * 2,
                  "split": ["train"] * 2}).to_parquet(path)
    with pytest.raises(ManifestError, match="uris must name image files"):
        referenced_files(path)
