"""End to end: `airflow dags test` of the nightly DAG, night after night, against moto_server and aiosmtpd.

The scenario runs once for the module; each test checks one property of it:

- night 1 is killed in the middle of tagging (the worker dies) and run again: it resumes without retagging the
  shards committed before the kill, quarantines the partition's one corrupt image, trains on the rest, promotes;
- night 2 brings a second partition: only it is tagged and judged, the model is retrained on both and promoted,
  while the SMTP server is unreachable: the promotion stands, the run says its notification failed, the email is
  queued;
- night 2 again (a rerun of the same night, SMTP back): no new work, nothing promoted twice, the first report
  is kept unchanged, the rerun's email says it is a rerun (not "NOT promoted"), and the queued email is sent;
- night 3, a full retrain with a deliberately weakened model (learning rate ~0): the gates block it.

Warm starts are on: night 1 trains from scratch (nothing promoted yet), night 2 from night 1's models for its
share of the steps, night 3 from scratch again (full_retrain).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
import torch
import yaml

from mavias.core.manifest import content_sample_id
from mavias.core.train.checkpoints import load_main_model
from mavias.ops.registry import PointerRecord
from mavias.tools.demo.run import DemoData
from mavias.utils.servers import free_port
from tests.airflow.conftest import deploy
from tests.airflow.harness import TEST_TRAINING, Deployment, Night, kill_group, wait_for
from tests.airflow.slow_tagger import DELAY_ENV

pytestmark = pytest.mark.slow

NIGHT_1, NIGHT_2, NIGHT_3 = date(2025, 1, 1), date(2025, 1, 2), date(2025, 1, 3)
SLOW_TAGGER = "tests.airflow.slow_tagger:SlowManifestTagger"
CORRUPT_URI = "images/corrupt/broken.png"


@dataclass
class Scenario:
    deployment: Deployment
    shards_before_kill: dict[str, int]  # committed shard file -> mtime_ns, when night 1 was killed
    night1: Night
    night2: Night
    history_after_night2: list[PointerRecord]
    emails_after_night2: int
    report_after_night2: bytes
    rerun: Night
    weakened: Night
    history_after_weakened: list[PointerRecord]


def _with_corrupt_image(data: DemoData, rows: pd.DataFrame) -> pd.DataFrame:
    payload = b"this is not a PNG"
    (data.root / CORRUPT_URI).parent.mkdir(parents=True, exist_ok=True)
    (data.root / CORRUPT_URI).write_bytes(payload)
    corrupt = rows.iloc[:1].assign(sample_id=content_sample_id(payload), uri=CORRUPT_URI)
    return pd.concat([rows, corrupt], ignore_index=True)


def _committed_shards(deployment: Deployment) -> dict[str, int]:
    tags = deployment.workspace / "discovery" / "tags"
    return {str(p.relative_to(tags)): p.stat().st_mtime_ns for p in tags.glob("*/tags-shard-*.parquet")}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, airflow_home: Path, moto_endpoint: str,
             scenes: DemoData) -> Iterator[Scenario]:
    with deploy(tmp_path_factory.mktemp("e2e"), airflow_home, moto_endpoint, scenes) as d:
        slow = {"MAVIAS_NIGHTLY__DISCOVERY__TAGGER": SLOW_TAGGER, DELAY_ENV: "0.5",
                "MAVIAS_NIGHTLY__TRAIN__WARM_START": "true"}
        fast = slow | {DELAY_ENV: "0"}
        d.upload("incoming/night-1/", scenes, _with_corrupt_image(scenes, scenes.partitions["night-1"]), "night-1")
        process, _ = d.start_night(NIGHT_1, env=slow, log_name="night-1-killed")
        wait_for(lambda: bool(_committed_shards(d)), process, 300, "the first committed shard")
        kill_group(process)
        before_kill = _committed_shards(d)
        night1 = d.run_night(NIGHT_1, env=slow, log_name="night-1-resumed")
        d.upload("incoming/night-2/", scenes, scenes.partitions["night-2"], "night-2")
        unreachable = json.loads(d.env["AIRFLOW_CONN_SMTP_DEFAULT"])
        unreachable |= {"port": free_port(), "extra": unreachable["extra"] | {"retry_limit": 1}}
        night2 = d.run_night(NIGHT_2, env=fast | {"AIRFLOW_CONN_SMTP_DEFAULT": json.dumps(unreachable)})
        history, emails, report2 = d.registry.history(), len(d.emails()), _report_bytes(night2)
        rerun = d.run_night(NIGHT_2, env=fast, log_name="night-2-rerun")
        weak_training = yaml.safe_dump(TEST_TRAINING | {"optim.lr": 1e-9, "epochs": 1}, default_flow_style=True)
        weakened = d.run_night(NIGHT_3, conf={"full_retrain": True},
                               env=fast | {"MAVIAS_NIGHTLY__TRAIN__OVERRIDES": weak_training})
        yield Scenario(d, before_kill, night1, night2, history, emails, report2, rerun, weakened, d.registry.history())


def _report_bytes(night: Night) -> bytes:
    return Path(night.results["report"]["html"]).read_bytes()


def test_killed_tagging_resumes_without_redoing_committed_shards(scenario: Scenario) -> None:
    night1 = scenario.night1
    assert night1.returncode == 0, night1.log
    total_shards = 2 * 2  # the evaluation set and night-1, 2 shards each
    planned = night1.results["plan_tagging"]
    assert 0 < len(scenario.shards_before_kill) < total_shards
    assert len(planned) == total_shards - len(scenario.shards_before_kill)
    still = {k: v for k, v in _committed_shards(scenario.deployment).items() if k in scenario.shards_before_kill}
    assert still == scenario.shards_before_kill  # never rewritten
    assert (night1.tasks["task_id"] == "tag_shard").sum() == len(planned)


def test_corrupt_image_is_quarantined_and_the_rest_trained(scenario: Scenario, scenes: DemoData) -> None:
    workspace = scenario.deployment.workspace
    validation = json.loads((workspace / "nights/20250101T000000/validation/night-1.json").read_text())
    assert validation["success"]
    assert [q["uri"] for q in validation["quarantined"]] == [CORRUPT_URI]
    dataset = scenario.night1.results["prepare_dataset"]
    quarantine = pd.read_csv(Path(dataset["dir"]) / "dataset" / "quarantine.csv")
    assert quarantine["uri"].str.endswith(CORRUPT_URI).tolist() == [True]
    assert dataset["sizes"]["quarantined"] == 1
    assert _trained_on(scenario.night1) == len(scenes.partitions["night-1"])


def test_first_night_promotes_and_emails_the_report(scenario: Scenario) -> None:
    promoted = scenario.night1.results["promote"]
    assert promoted["promoted"], scenario.night1.results["quality_gates"]
    first_email = scenario.deployment.emails()[0]
    assert promoted["version"] in first_email["Subject"] and "promoted" in first_email["Subject"]
    html = first_email.get_body(("html",)).get_content()
    assert "MAVias nightly bias report" in html and promoted["version"] in html
    report = scenario.night1.results["report"]
    assert report["recipients"] == ["ml-team@example.com"]
    assert scenario.night1.results["notify"]["sent"] == [report["queued"]]  # the report queues, notify sends
    key = report["uri"].removeprefix(f"s3://{scenario.deployment.settings.bucket}/")
    saved = scenario.deployment.client.get_object(Bucket=scenario.deployment.settings.bucket, Key=key)
    assert b"MAVias nightly bias report" in saved["Body"].read()


def _trained_on(night: Night) -> int:
    sizes = night.results["prepare_dataset"]["sizes"]
    return sizes["train"] + sizes["val"]


def test_second_night_is_incremental_and_promoted(scenario: Scenario, scenes: DemoData) -> None:
    night2, night1 = scenario.night2, scenario.night1
    assert night2.state("promote") == "success", night2.log
    discovered = night2.results["discover"]
    assert discovered["partitions"] == ["night-2"]  # the evaluation set and night-1 are not discovered again
    assert discovered["images_tagged"] == len(scenes.partitions["night-2"])
    assert discovered["tags_judged"] < night1.results["discover"]["tags_judged"]
    assert _trained_on(night2) == _trained_on(night1) + len(scenes.partitions["night-2"])  # on all data
    assert night2.results["promote"]["promoted"], night2.results["quality_gates"]
    assert [r.version for r in scenario.history_after_night2] == [
        night1.results["promote"]["version"], night2.results["promote"]["version"]
    ]


def test_the_second_night_trains_warm_from_the_first_and_a_full_retrain_from_scratch(scenario: Scenario) -> None:
    night1, night2 = scenario.night1.results["train_reference"], scenario.night2.results["train_reference"]
    assert night1["start"]["mode"] == "cold" and "no model was promoted yet" in night1["start"]["reason"]
    start = night2["start"]
    assert start["mode"] == "warm" and start["from_night"] == "20250101T000000"
    old, total = (night.results["prepare_dataset"]["sizes"]["train"] for night in (scenario.night1, scenario.night2))
    assert start["fraction"] == pytest.approx((total - old + 0.25 * old) / total)  # the new share + the replay
    warm_folder = scenario.deployment.workspace / "warm" / "20250101T000000"
    for run, checkpoint in ((night2["dir"], "reference.pt"), (scenario.night2.results["train_mavias"]["dir"],
                                                               "candidate.pt")):
        config = yaml.safe_load((Path(run) / "config.yaml").read_text())
        assert config["init_from"] == str(warm_folder / checkpoint)
        assert config["epochs"] == math.ceil(TEST_TRAINING["epochs"] * start["fraction"])
    report = Path(scenario.night2.results["report"]["html"]).read_text()
    assert "trained warm: " in report
    weakened = scenario.weakened.results["train_reference"]["start"]
    assert weakened["mode"] == "cold" and "full_retrain" in weakened["reason"]
    state = json.loads((scenario.deployment.workspace / "warm" / "state.json").read_text())
    assert state["promoted"]["night"] == "20250102T000000" and state["promoted"]["warm_chain"] == 1
    assert state["failed_nights"] == ["20250103T000000"]  # the weakened night's candidate failed its gates


def test_promoted_onnx_loads_in_onnxruntime_and_matches_pytorch(scenario: Scenario, tmp_path: Path) -> None:
    deployment = scenario.deployment
    production = deployment.registry.production()
    prefix = f"{deployment.registry.prefix}{production.version}/"
    for name in ("model.onnx", "model.pt"):
        deployment.client.download_file(deployment.settings.bucket, prefix + name, str(tmp_path / name))
    model, _, cfg = load_main_model(tmp_path / "model.pt")
    images = torch.rand(8, 3, cfg.image_size, cfg.image_size)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    (onnx_logits,) = session.run(None, {session.get_inputs()[0].name: images.numpy()})
    with torch.inference_mode():
        np.testing.assert_allclose(onnx_logits, model(images).numpy(), atol=1e-4)


def _subjects_after_night2(scenario: Scenario) -> list[str]:
    return [e["Subject"] for e in scenario.deployment.emails()[scenario.emails_after_night2:]]


def test_smtp_failure_after_promotion_keeps_the_promotion_and_queues_the_email(scenario: Scenario) -> None:
    night2 = scenario.night2
    assert night2.results["promote"]["promoted"] and night2.state("report") == "success"
    assert night2.results["report"]["status"] == "promoted" and night2.results["report"]["queued"]
    assert night2.state("notify") == "failed" and night2.state("finish") == "failed" and night2.returncode != 0
    assert "its notification failed" in night2.log.read_text()
    assert scenario.emails_after_night2 == 1  # night 1's only
    version = night2.results["promote"]["version"]  # the next run sends the queued email first
    assert _subjects_after_night2(scenario)[0] == f"[mavias] scenes-test {version}: promoted"


def test_rerun_keeps_the_first_report_and_says_it_is_a_rerun(scenario: Scenario) -> None:
    rerun, night2 = scenario.rerun, scenario.night2
    assert _report_bytes(night2) == scenario.report_after_night2  # never overwritten
    assert (night2.results["report"]["attempt"], rerun.results["report"]["attempt"]) == (1, 2)
    (subject,) = [s for s in _subjects_after_night2(scenario) if "rerun" in s]
    assert "NOT promoted" not in subject and f"original outcome: scenes-test {night2.results['promote']['version']}: promoted" in subject


def test_rerun_of_a_night_does_no_work_and_promotes_nothing_twice(scenario: Scenario) -> None:
    rerun = scenario.rerun
    assert rerun.returncode == 0, rerun.log
    assert rerun.results["pull_and_validate"]["valid"] == []
    for task_id in ("tag_shard", "discover", "train_reference", "train_mavias", "publish", "promote"):
        assert rerun.state(task_id) == "skipped", task_id
    assert rerun.results["report"]["promoted"] is False
    assert scenario.deployment.registry.history()[: len(scenario.history_after_night2)] == scenario.history_after_night2
    assert "no new partitions" in Path(rerun.results["report"]["html"]).read_text()


def test_weakened_model_is_blocked_and_the_report_names_the_gate(scenario: Scenario) -> None:
    weakened = scenario.weakened
    assert weakened.returncode == 0, weakened.log
    gates = weakened.results["quality_gates"]
    assert not gates["passed"]
    failed = [g["name"] for g in gates["gates"] if g["status"] == "failed"]
    assert "min_worst_group_accuracy" in failed
    assert weakened.state("publish") == "skipped" and weakened.state("promote") == "skipped"
    assert scenario.history_after_weakened == scenario.history_after_night2  # production untouched
    html = Path(weakened.results["report"]["html"]).read_text()
    assert "not promoted" in html.lower() and "min_worst_group_accuracy" in html
    assert "NOT promoted" in scenario.deployment.emails()[-1]["Subject"]
