"""The DAG folder imports with zero errors and without the packages only tasks use (the light tasks' stages without
torch or ONNX), GPU tasks carry pool, queue and GPU resources, the hooks map Airflow connections to the library's
settings without leaking secrets, and a bad config is a clear import error.

Airflow runs in a subprocess (its settings are read once, at import), configured like the demo's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mavias.tools.demo.services import airflow_environment
from tests.support.s3server import create_bucket, moto_endpoint  # noqa: F401 - a fixture
from tests.support.unconditional_store import UnconditionalStore, unconditional_store  # noqa: F401 - a fixture

GPU_TASKS = {"tag_shard", "train_reference", "tune_trial"}
# What the tasks use and the DAG file must not import: the dag-processor parses the file every few minutes
TASK_ONLY_PACKAGES = ("torch", "torchvision", "open_clip", "matplotlib", "scipy", "sklearn", "onnx", "onnxruntime",
                      "great_expectations", "sentence_transformers", "openai")
# The stage modules of the tasks that only plan work or move files, pointers and mail (sense ... should_train,
# plan_tagging, plan_trials, publish, promote, record_processed, report, notify, clean_up, finish, quality_gates): a
# worker starts each task in a fresh process, and importing torch there would cost seconds per task for nothing
LIGHT_STAGES = ("mavias.ops.nightly.ingest", "mavias.ops.nightly.tagging_plan", "mavias.ops.nightly.trial_plan",
                "mavias.ops.nightly.release", "mavias.ops.nightly.warm", "mavias.ops.nightly.report",
                "mavias.ops.nightly.retention", "mavias.ops.nightly.failures", "mavias_airflow.operators")
MODEL_PACKAGES = ("torch", "torchvision", "open_clip", "onnx", "onnxruntime", "sentence_transformers")
SECRET = "s3cr3t-never-logged"

PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag

def imported(packages):
    return sorted({name.split(".")[0] for name in sys.modules} & set(packages.split(",")))

bag = DagBag(dag_folder=sys.argv[1])
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "tasks": {},
       "parse_imported": imported(sys.argv[2])}
dag = bag.dags.get("mavias_nightly")
if dag is not None:
    from mavias_airflow.hooks import MaviasHook, smtp_settings_from_connection

    out |= {"schedule": str(dag.schedule), "catchup": dag.catchup, "max_active_runs": dag.max_active_runs,
            "params": {k: dag.params[k] for k in dag.params}, "dagrun_timeout_s": dag.dagrun_timeout.total_seconds()}
    for task in dag.tasks:
        pod = task.executor_config.get("pod_override")
        limits = pod.spec.containers[0].resources.limits if pod is not None else None
        out["tasks"][task.task_id] = {"pool": task.pool, "queue": task.queue, "gpu_limits": limits,
                                      "mapped": task.is_mapped, "trigger_rule": task.trigger_rule.value,
                                      "timeout_s": task.execution_timeout and task.execution_timeout.total_seconds(),
                                      "upstream": sorted(task.upstream_task_ids)}
    cfg = MaviasHook().get_config()
    smtp = smtp_settings_from_connection("smtp_default")
    out["s3"] = {"endpoint_url": cfg.s3.endpoint_url, "secret": cfg.s3.secret_access_key.get_secret_value(),
                 "repr": repr(cfg.s3) + str(cfg.model_dump())}
    registry = MaviasHook().get_conn()
    out["registry"] = {"name": registry.name, "prefix": registry.prefix,
                       "endpoint": registry.client.meta.endpoint_url}
    out["smtp"] = {"host": smtp.host, "port": smtp.port, "security": smtp.security, "from_addr": smtp.from_addr}
    out["smtp_uri_security"] = smtp_settings_from_connection("smtp_uri").security

    import dataclasses
    from mavias.core.judging.factory import JudgeSettings
    from mavias_airflow.hooks import llm_settings_from_connection
    from mavias_airflow.preflight import llm_problems

    llm = llm_settings_from_connection(JudgeSettings.llm_from_environment(), "mavias_llm")
    out["llm"] = {"base_url": llm.base_url, "model": llm.model, "samples": llm.samples, "timeout": llm.timeout,
                  "reasoning": llm.reasoning, "key": llm.api_key.get_secret_value(), "repr": repr(llm)}
    as_llm = cfg.model_copy(update={"discovery": cfg.discovery.model_copy(update={"judge": "llm"})})
    no_conn = as_llm.model_copy(update={"airflow": as_llm.airflow.model_copy(update={"llm_conn_id": "no_llm"})})
    remote = as_llm.with_llm(dataclasses.replace(llm, base_url="http://10.1.2.3:8000/v1"))
    out["llm_problems"] = {"ok": llm_problems(as_llm.with_llm(llm)), "missing": llm_problems(no_conn),
                           "clear_text": llm_problems(remote), "offline": llm_problems(cfg)}
    import importlib
    for module in sys.argv[3].split(","):
        importlib.import_module(module)
    out["light_stages_imported"] = imported(sys.argv[4])
print("PROBE " + json.dumps(out, default=str))
"""

# argv: a moto_server endpoint and a bucket there; the aws connection's endpoint ignores conditional writes
PREFLIGHT_PROBE = """
import json, sys
import airflow  # puts the plugins folder on sys.path
from mavias_airflow.hooks import MaviasHook
from mavias_airflow.preflight import preflight_problems, store_problem

cfg = MaviasHook().get_config()
moto = cfg.model_copy(update={"s3": cfg.s3.model_copy(update={"endpoint_url": sys.argv[1], "bucket": sys.argv[2]})})
missing = moto.model_copy(update={"s3": moto.s3.model_copy(update={"bucket": "no-such-bucket"})})
out = {"unconditional": preflight_problems(cfg), "moto": store_problem(moto), "missing_bucket": store_problem(missing)}
print("PREFLIGHT " + json.dumps(out))
"""


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "nightly.yaml"
    config.write_text(yaml.safe_dump({"model_name": "m", "workspace": str(tmp_path / "ws"), "s3": {"bucket": "b"}}))
    return config


def probe(tmp_path: Path, **env: str) -> dict:
    environment = airflow_environment(tmp_path / "home", write_config(tmp_path), "http://127.0.0.1:9000", 2525) | env
    aws = json.loads(environment["AIRFLOW_CONN_AWS_DEFAULT"])
    environment["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(aws | {"password": SECRET})
    environment["AIRFLOW_CONN_MAVIAS_LLM"] = json.dumps({
        "conn_type": "http", "host": "https://llm.example.com/v1", "password": SECRET,
        "extra": {"model": "gpt-x", "samples": 3, "timeout": 30, "reasoning": "false"},
    })  # fmt: skip
    environment["AIRFLOW_CONN_SMTP_URI"] = "smtp://127.0.0.1:587?disable_ssl=true&disable_tls=false"
    dags = environment["AIRFLOW__CORE__DAGS_FOLDER"]
    args = [dags, ",".join(TASK_ONLY_PACKAGES), ",".join(LIGHT_STAGES), ",".join(MODEL_PACKAGES)]
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=environment, capture_output=True, text=True,
                          timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, done.stdout[-3000:] + done.stderr[-3000:]
    assert SECRET not in done.stdout.replace(line, "") + done.stderr
    return json.loads(line.removeprefix("PROBE "))


@pytest.fixture(scope="module")
def dag_info(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return probe(tmp_path_factory.mktemp("dagbag"))


def test_dag_folder_imports_without_errors(dag_info: dict) -> None:
    assert dag_info["import_errors"] == {}
    assert dag_info["schedule"] == "@daily" and dag_info["catchup"] is False and dag_info["max_active_runs"] == 1
    assert dag_info["params"] == {"full_retrain": False, "skip_promotion": False, "force_partition": None}


def test_parsing_the_dag_file_imports_no_task_only_package(dag_info: dict) -> None:
    assert dag_info["parse_imported"] == []


def test_the_tasks_that_move_files_and_mail_import_no_model_package(dag_info: dict) -> None:
    assert dag_info["light_stages_imported"] == []


def test_gpu_tasks_carry_pool_queue_and_resources(dag_info: dict) -> None:
    tasks = dag_info["tasks"]
    for task_id in GPU_TASKS:
        assert (tasks[task_id]["pool"], tasks[task_id]["queue"]) == ("gpu", "gpu"), task_id
        if importlib.util.find_spec("kubernetes") is not None:
            assert tasks[task_id]["gpu_limits"] == {"nvidia.com/gpu": "1"}, task_id
    for task_id in tasks.keys() - GPU_TASKS:
        assert tasks[task_id]["pool"] == "default_pool" and tasks[task_id]["gpu_limits"] is None, task_id
    assert tasks["tag_shard"]["mapped"]
    assert tasks["report"]["trigger_rule"] == "all_done"


def test_tuning_trials_are_mapped_gpu_tasks_between_planning_and_selection(dag_info: dict) -> None:
    tasks = dag_info["tasks"]
    assert tasks["tune_trial"]["mapped"] and not tasks["plan_trials"]["mapped"]
    assert {"plan_trials", "prepare_dataset", "train_reference"} <= set(tasks["tune_trial"]["upstream"])
    assert "tune_trial" in tasks["train_mavias"]["upstream"]
    assert tasks["train_mavias"]["pool"] == "default_pool"  # selection only; the training ran in the trials
    for task_id in ("train_reference", "plan_trials"):  # skipped when tonight's data is production's
        assert "data_changed" in tasks[task_id]["upstream"], task_id
    assert tasks["data_changed"]["upstream"] == ["prepare_dataset"]


def test_every_task_and_the_run_are_bounded_in_time_and_preflight_comes_first(dag_info: dict) -> None:
    assert dag_info["dagrun_timeout_s"] == 20 * 3600
    tasks = dag_info["tasks"]
    for task_id, task in tasks.items():
        assert task["timeout_s"] == (360 if task_id in GPU_TASKS else 60) * 60, task_id
    assert tasks["sense"]["upstream"] == ["preflight"] and tasks["preflight"]["upstream"] == []
    assert tasks["notify"]["upstream"] == ["report"] and tasks["clean_up"]["upstream"] == ["notify"]
    assert tasks["finish"]["upstream"] == ["clean_up"]


def test_the_report_waits_for_every_task_but_the_short_circuits(dag_info: dict) -> None:
    # a short circuit's direct downstream is skipped when it says no: the report must not be one
    short_circuits = {"should_train", "data_changed", "gates_passed", "promotion_requested"}
    after = {"report", "notify", "clean_up", "finish"}
    tasks = dag_info["tasks"]
    assert set(tasks["report"]["upstream"]) == set(tasks) - short_circuits - after
    assert tasks["report"]["trigger_rule"] == "all_done"


def test_hooks_map_connections_and_keep_secrets(dag_info: dict) -> None:
    assert dag_info["s3"]["endpoint_url"] == "http://127.0.0.1:9000"  # from the connection's extra
    # the hook's client is the configured model's registry, on the connection's endpoint
    assert dag_info["registry"]["name"] == "m" and dag_info["registry"]["prefix"].endswith("m/")
    assert dag_info["registry"]["endpoint"] == "http://127.0.0.1:9000"
    assert dag_info["s3"]["secret"] == SECRET
    assert SECRET not in dag_info["s3"]["repr"]
    assert dag_info["smtp"] == {"host": "127.0.0.1", "port": 2525, "security": "none", "from_addr": "mavias@localhost"}
    assert dag_info["smtp_uri_security"] == "starttls"  # URI extras are strings: disable_tls=false keeps TLS


def test_the_llm_judge_comes_from_its_connection_and_preflight_names_what_is_missing(dag_info: dict) -> None:
    llm = dag_info["llm"]
    assert (llm["base_url"], llm["model"], llm["samples"], llm["timeout"]) == ("https://llm.example.com/v1", "gpt-x",
                                                                               3, 30.0)
    assert llm["key"] == SECRET and SECRET not in llm["repr"] and llm["reasoning"] is False  # "false" is false
    problems = dag_info["llm_problems"]
    assert problems["ok"] == [] and problems["offline"] == []
    assert "no connection 'no_llm'" in problems["missing"][0] and "airflow connections add" in problems["missing"][0]
    assert "clear text" in problems["clear_text"][0]


def test_preflight_names_a_bucket_that_ignores_conditional_writes_or_does_not_exist(
        tmp_path: Path, unconditional_store: UnconditionalStore, moto_endpoint: str) -> None:
    environment = airflow_environment(tmp_path / "home", write_config(tmp_path), unconditional_store.endpoint_url, 2525)
    done = subprocess.run([sys.executable, "-c", PREFLIGHT_PROBE, moto_endpoint, create_bucket(moto_endpoint)],
                          env=environment, capture_output=True, text=True, timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PREFLIGHT ")), None)
    assert line, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(line.removeprefix("PREFLIGHT "))

    ignoring = f"the store at {unconditional_store.endpoint_url} (bucket b) ignores or does not support If-None-Match and If-Match: "
    assert [p for p in found["unconditional"] if p.startswith(ignoring)], found["unconditional"]
    assert found["moto"] is None
    assert found["missing_bucket"].startswith("the bucket does not exist; create it")


def test_bad_config_is_a_clear_import_error(tmp_path: Path) -> None:
    info = probe(tmp_path, MAVIAS_NIGHTLY__DISCOVERY__TAGGER="nope")
    (error,) = info["import_errors"].values()
    assert "invalid nightly config" in error and "discovery.tagger" in error
