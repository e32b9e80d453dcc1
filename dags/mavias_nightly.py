"""
### mavias_nightly

Nightly open-set bias audit and MAVias retraining. Every task calls one stage function of `mavias.ops.nightly`; this
file only wires.

0. **preflight**: the `gpu` pool and the connections exist and the bucket honours conditional writes (fails in
   seconds, saying what to do),
1. **sense** new partitions under `s3://<bucket>/incoming/<partition>/` (processed ones are skipped),
2. **pull_and_validate** them with Great Expectations (a failing partition is quarantined and nothing is trained),
3. **discover** incrementally: `tag_shard` is mapped over the untagged shards, then judge and encode,
4. **data_changed** skips the training when tonight's data and settings are exactly production's (same digest),
   else **train_reference** (ERM) on all accumulated data on the `gpu` pool and queue, then MAVias: **plan_trials**
   (previous night's best settings first, then Optuna TPE), **tune_trial** mapped over them (one trial per GPU
   task), **train_mavias** picks the trial with the best validation criterion,
5. **evaluate** candidate, reference and production on the fixed evaluation set, 6. **quality_gates**,
7. **package** (ONNX + verification + model card), 8. **publish** and **promote** when every gate passed,
9. **report** by email and next to the models, whatever happened (a new attempt per rerun, never overwritten),
10. **notify** sends the queued emails (kept for the next try or night when SMTP fails); **clean_up** deletes what
the `retention` settings do not keep (old prepared datasets and night folders); **finish** fails the run
if a task failed, saying when only the notification did, when the report says the night failed (a corrupt
production pointer), or when the promoted version could not be pointed at by the configured KServe
InferenceService (the promotion stands; the report gives the command to retry).

Every task has an `execution_timeout` and the run a `dagrun_timeout` (see the `airflow` section of the config).
A stage's error is kept for the report in one line; a user mistake (configuration, unsafe name, missing evaluation
set) fails its task at once, without retries (`mavias_airflow.stages.run_stage`).

Params (manual runs): `full_retrain` (train even without new partitions, from scratch), `skip_promotion`
(publish but leave production alone), `force_partition` (process this partition again).
Configuration: `$MAVIAS_NIGHTLY_CONFIG` (see `mavias.ops.nightly.config`); connections `aws_default` (optional,
else the AWS environment) and `smtp_default`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, time, timedelta

from airflow.sdk import Asset, AssetAlias, Context, Param, TriggerRule, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from mavias.ops.nightly.config import NightlyConfig, load_nightly_config
from mavias_airflow.hooks import MaviasHook, smtp_settings_from_connection
from mavias_airflow.operators import QualityGateOperator
from mavias_airflow.resources import gpu_task_kwargs
from mavias_airflow.stages import night_of, night_time, run_stage

log = logging.getLogger(__name__)
CONFIG = load_nightly_config()  # YAML + environment only: connections are resolved inside the tasks
SETTINGS = CONFIG.airflow
GPU = gpu_task_kwargs(SETTINGS) | {"execution_timeout": timedelta(minutes=SETTINGS.gpu_task_timeout_min)}
PROMOTIONS = AssetAlias("mavias-promotions")
PRODUCTION_MODEL = Asset(
    name=f"mavias/{CONFIG.model_name}/production",
    uri=f"s3://{CONFIG.s3.bucket}/{CONFIG.s3.models_prefix}{CONFIG.model_name}/production.json",
)
# result name (as mavias.ops.nightly.report.report() reads it) -> the task returning it
RESULT_TASKS = {
    "sensed": "sense", "validated": "pull_and_validate", "planned": "plan_tagging", "discovered": "discover",
    "dataset": "prepare_dataset", "reference": "train_reference", "candidate": "train_mavias",
    "evaluated": "evaluate", "gates": "quality_gates", "packaged": "package", "published": "publish",
    "promoted": "promote", "recorded": "record_processed",
}


def _config() -> NightlyConfig:
    return MaviasHook().get_config()


def _task_states(context: Context) -> dict[str, str]:
    run_id = context["run_id"]
    return context["ti"].get_task_states(dag_id=context["dag"].dag_id, run_ids=[run_id])[run_id]


# -- the tasks: each calls one stage function; the stage modules are imported when a task runs (torch, onnx, Great
# Expectations), not when the DAG is parsed -------------------------------------------------------------------


@task
def preflight() -> None:
    from mavias.ops.nightly.failures import record_failure
    from mavias_airflow.preflight import preflight_problems  # httpx and openai: not at every parse of this file

    cfg = _config()
    problems = preflight_problems(cfg)
    if problems:
        message = "the night cannot run: " + "; ".join(problems)
        record_failure(cfg, night_of(get_current_context()), "preflight", message)
        raise AirflowFailException(message)


@task
def sense() -> dict:
    from mavias.ops.nightly import ingest

    context = get_current_context()
    return run_stage(ingest.sense, night_time(context), force_partition=context["params"]["force_partition"])


@task
def pull_and_validate(sensed: dict) -> dict:
    from mavias.ops.nightly import ingest

    return run_stage(ingest.pull_and_validate, sensed)


@task.short_circuit(ignore_downstream_trigger_rules=False)
def should_train(validated: dict) -> bool:
    from mavias.ops.nightly import ingest

    full_retrain = get_current_context()["params"]["full_retrain"]
    go, why = ingest.training_decision(validated, full_retrain=full_retrain)
    log.info("%s: %s", "training" if go else "not training", why)
    return go


@task
def plan_tagging(validated: dict) -> list[dict]:
    from mavias.ops.nightly import tagging_plan

    return run_stage(tagging_plan.plan_tagging, validated)


@task(**GPU, map_index_template="{{ shard_label }}")
def tag_shard(batch: list[dict]) -> list[dict]:
    from mavias.ops.nightly import discover

    first, more = batch[0], f" +{len(batch) - 1}" if len(batch) > 1 else ""
    get_current_context()["shard_label"] = f"{first['partition']} {first['shard']}/{first['num_shards']}{more}"
    return run_stage(discover.tag_shards, batch)


@task(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)  # also when no shard was left to tag
def discover(validated: dict, tagged: list[list[dict]] | None) -> dict:
    from mavias.ops.nightly import discover

    return run_stage(discover.discover, validated, list(tagged or []))


@task
def prepare_dataset(validated: dict, discovered: dict) -> dict:
    """``discovered`` is read from the workspace, not from XCom: the argument only orders this task after it."""
    from mavias.ops.nightly import dataset

    full_retrain = get_current_context()["params"]["full_retrain"]
    return run_stage(dataset.prepare_dataset, validated, full_retrain=full_retrain)


@task.short_circuit(ignore_downstream_trigger_rules=False)
def data_changed(dataset: dict) -> bool:
    """False (training is skipped) when production was made from exactly tonight's data and settings."""
    if same := dataset.get("same_as_production"):
        log.info("not training: tonight's dataset %s is the one production %s was made from", dataset["digest"], same)
    return not same


@task(**GPU)
def train_reference(dataset: dict) -> dict:
    from mavias.ops.nightly import train

    full_retrain = get_current_context()["params"]["full_retrain"]
    return run_stage(train.train_reference_model, dataset, full_retrain=full_retrain)


@task
def plan_trials(dataset: dict, reference: dict) -> list[dict]:
    from mavias.ops.nightly import trial_plan

    return run_stage(trial_plan.plan_trials, dataset, reference)


@task(**GPU, map_index_template="{{ trial_label }}")
def tune_trial(dataset: dict, reference: dict, job: dict) -> dict:
    from mavias.ops.nightly import train

    get_current_context()["trial_label"] = f"trial {job['number']}"
    return run_stage(train.run_trial, dataset, reference, job)


@task
def train_mavias(dataset: dict, reference: dict, trials: list[dict]) -> dict:
    from mavias.ops.nightly import train

    return run_stage(train.select_candidate, dataset, reference, list(trials))


@task(multiple_outputs=True)
def evaluate(dataset: dict, reference: dict, candidate: dict) -> dict:
    from mavias.ops.nightly import evaluate

    return run_stage(evaluate.evaluate, dataset, reference, candidate)


@task
def package(dataset: dict, candidate: dict, evaluated: dict, gates: dict) -> dict:
    from mavias.ops.nightly import package as packaging

    return run_stage(packaging.package, dataset, candidate, evaluated, gates)


@task.short_circuit(ignore_downstream_trigger_rules=False)
def gates_passed(gates: dict) -> bool:
    return gates["passed"]


@task
def publish(packaged: dict) -> dict:
    from mavias.ops.nightly import release

    return run_stage(release.publish, packaged)


@task.short_circuit(ignore_downstream_trigger_rules=False)
def promotion_requested() -> bool:
    return not get_current_context()["params"]["skip_promotion"]


@task(outlets=[PROMOTIONS])
def promote(published: dict, evaluated: dict) -> dict:
    from mavias.ops.nightly import release

    result = run_stage(release.promote, published, evaluated)
    if result["promoted"]:  # an asset event for tonight's promotion (again on this task's retry: pointing serving
        # at the same version twice changes nothing), none for a lost race or a rerun of a promoted night
        get_current_context()["outlet_events"][PROMOTIONS].add(PRODUCTION_MODEL, extra={"version": result["version"]})
    return result


@task(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)  # after promotion, or after a blocked candidate
def record_processed(dataset: dict) -> dict:
    from mavias.ops.nightly import ingest, warm

    context = get_current_context()
    states = _task_states(context)  # a task skipped tonight may still hold the value of an earlier try
    outcomes = [context["ti"].xcom_pull(task_ids=task) if states.get(task) == "success" else None
                for task in ("train_reference", "train_mavias", "quality_gates", "promote")]
    recorded = run_stage(ingest.record_processed, dataset)
    return recorded | run_stage(warm.record_outcome, dataset, *outcomes)  # both idempotent: a retry repeats them


@task(trigger_rule=TriggerRule.ALL_DONE)
def report() -> dict:
    from mavias.ops.nightly import ingest, report

    context = get_current_context()
    states = _task_states(context)
    # Only this try's results: a skipped task keeps the XCom of an earlier try of the run (after a clear).
    results = {
        name: context["ti"].xcom_pull(task_ids=task_id)
        for name, task_id in RESULT_TASKS.items()
        if states.get(task_id) == "success"
    }
    params = context["params"]
    results.setdefault("sensed", ingest.night_info(night_time(context)))
    if "validated" in results:
        trained, decision = ingest.training_decision(results["validated"], full_retrain=params["full_retrain"])
    elif states.get("preflight") != "success":
        trained, decision = False, "the preflight check failed (see its log): nothing ran tonight"
    else:
        trained, decision = False, "the partitions could not be pulled or validated (see the task log)"
    cfg = _config()
    return report.report(
        cfg, results, trained=trained, decision=decision, skip_promotion=params["skip_promotion"],
        smtp=smtp_settings_from_connection(cfg.airflow.smtp_conn_id), states=states,
        run=f"{context['run_id']} {context['dag_run'].start_date}",  # a rerun of the night is another run
    )


@task(trigger_rule=TriggerRule.ALL_DONE)
def notify() -> dict:
    """Send the queued report emails (tonight's and any an earlier night could not send)."""
    from mavias.ops.nightly import report

    cfg = _config()
    return report.notify(cfg, smtp_settings_from_connection(cfg.airflow.smtp_conn_id))


@task(trigger_rule=TriggerRule.ALL_DONE)
def clean_up() -> dict:
    """Delete what retention does not keep, after the report has read what it needs."""
    from mavias.ops.nightly import retention

    context = get_current_context()
    prepared = _task_states(context).get("prepare_dataset") == "success"
    dataset = context["ti"].xcom_pull(task_ids="prepare_dataset") if prepared else None
    return run_stage(retention.clean_up, night_of(context), (dataset or {}).get("digest"))


@task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
def finish() -> None:
    """Fail the run when any task failed; the report has been sent (or queued) by then."""
    from mavias.ops.nightly import release

    context = get_current_context()
    states = _task_states(context)
    failed = sorted(t for t, s in states.items() if s in ("failed", "upstream_failed"))
    if failed == ["notify"]:
        status = (context["ti"].xcom_pull(task_ids="report") or {}).get("status", "")
        raise AirflowFailException(f"the night's work is done ({status}) but its notification failed: the email "
                                   "is queued in the workspace outbox and is sent by the next night")
    if failed:
        raise AirflowFailException(f"task(s) failed: {', '.join(failed)}")
    if failure := (context["ti"].xcom_pull(task_ids="report") or {}).get("failure"):
        raise AirflowFailException(f"{failure} (the report went out and says what to do)")
    promoted = context["ti"].xcom_pull(task_ids="promote") if states.get("promote") == "success" else None
    if serving := release.serving_problem(promoted):  # the promotion stands; someone must point serving at it
        raise AirflowFailException(serving)


# -- the wiring -----------------------------------------------------------------------------------------------------


@dag(
    dag_id="mavias_nightly",
    schedule=SETTINGS.schedule,
    start_date=datetime.combine(SETTINGS.start_date, time(), tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=SETTINGS.dagrun_timeout_h),
    default_args={
        "execution_timeout": timedelta(minutes=SETTINGS.task_timeout_min),
        "retries": SETTINGS.retries,
        "retry_delay": timedelta(seconds=SETTINGS.retry_delay_s),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(seconds=SETTINGS.max_retry_delay_s),
    },
    params={
        "full_retrain": Param(False, type="boolean", description="Train even without new partitions, from scratch."),
        "skip_promotion": Param(False, type="boolean", description="Publish the candidate but leave production alone."),
        "force_partition": Param(None, type=["null", "string"], description="Process this partition again."),
    },
    tags=["mavias"],
    doc_md=__doc__,
)
def mavias_nightly() -> None:
    checked, sensed = preflight(), sense()
    checked >> sensed
    validated = pull_and_validate(sensed)
    go = should_train(validated)
    plan = plan_tagging(validated)
    tagged = tag_shard.expand(batch=plan)
    discovered = discover(validated, tagged)
    go >> [plan, discovered]  # the short circuit skips these directly; their downstream by trigger rule
    plan >> discovered
    dataset = prepare_dataset(validated, discovered)
    reference = train_reference(dataset)
    planned_trials = plan_trials(dataset, reference)
    data_changed(dataset) >> [reference, planned_trials]
    trials = tune_trial.partial(dataset=dataset, reference=reference).expand(job=planned_trials)
    candidate = train_mavias(dataset, reference, trials)
    evaluated = evaluate(dataset, reference, candidate)
    gates = QualityGateOperator(
        task_id="quality_gates",
        candidate_metrics=evaluated["candidate"],
        reference_metrics=evaluated["reference"],
        production_metrics=evaluated["production"],
        production_not_compared=evaluated["production_not_compared"],
        gates_path=str(CONFIG.gates),
    )
    packaged = package(dataset, candidate, evaluated, gates.output)
    published = publish(packaged)
    promoted = promote(published, evaluated)
    gates_passed(gates.output) >> published >> promotion_requested() >> promoted
    recorded = record_processed(dataset)
    [packaged, published, promoted] >> recorded
    # report (all done) waits for its direct upstreams only: every task but the short circuits (whose direct
    # downstream they would skip), so no mapped GPU task is still running when one failure skipped the rest
    results = [checked, sensed, validated, plan, tagged, discovered, dataset, reference, planned_trials, trials,
               candidate, evaluated, gates, packaged, published, promoted, recorded]
    results >> report() >> notify() >> clean_up() >> finish()


mavias_nightly()
