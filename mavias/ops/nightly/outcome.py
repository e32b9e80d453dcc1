"""A night that is not a plain gate verdict or promotion: each cause gets its own headline, reasons and next steps
in the report and the email (:class:`~mavias.ops.reporting.context.NightProblem`), and says whether the night failed
(``finish`` then fails the run, after the report went out).

Causes, the first that applies: a task that failed (the first in the night's order; a user mistake, such as a
configuration error, is named so), a corrupt production pointer, tonight's data being exactly production's, partitions
rejected by validation, nothing new to train on.
"""

from __future__ import annotations

from collections.abc import Mapping

from mavias.ops.nightly.artifacts import NightResults
from mavias.ops.nightly.failures import TaskFailure
from mavias.ops.reporting.context import NightProblem

RESUMES = ("Clearing the failed task (or the next night) resumes the work: finished shards, datasets and training "
           "epochs are kept.")
OUTAGE = ("If the bucket was unreachable, nothing was quarantined: the partitions wait in incoming/ and clearing "
          "the task (or the next night) takes them.")
STAGES: dict[str, tuple[str, str]] = {  # task -> (what failed, the next step), in the night's order
    "preflight": ("the night could not start (preflight check)", "Do what the message says, then clear the run."),
    "sense": ("the incoming partitions could not be listed", OUTAGE),
    "pull_and_validate": ("the new data could not be pulled or validated", OUTAGE),
    "plan_tagging": ("bias discovery failed", RESUMES),
    "tag_shard": ("bias discovery (tagging) failed", RESUMES),
    "discover": ("bias discovery (judging, encoding) failed", RESUMES),
    "prepare_dataset": ("the training data could not be prepared", RESUMES),
    "train_reference": ("training failed (the ERM reference)", RESUMES + " If the message names a setting, change "
                        "train.overrides in the nightly config."),
    "plan_trials": ("training failed (planning the settings search)", RESUMES),
    "tune_trial": ("training failed (a MAVias settings trial)", RESUMES + " If the message names a setting, change "
                   "train.overrides in the nightly config."),
    "train_mavias": ("training failed (choosing the candidate)", RESUMES),
    "evaluate": ("the candidate could not be evaluated", RESUMES),
    "quality_gates": ("the quality gates could not be evaluated",
                      "Check the gate config against the evaluation's metrics (wg_source), then clear the task."),
    "package": ("the candidate could not be packaged (ONNX export)", RESUMES),
    "publish": ("the candidate could not be published",
                ("If the bucket was unreachable, the version folder stays in the workspace: clearing the task (or a "
                 "rerun of the night) publishes it.")),
    "promote": ("the candidate could not be promoted", "Production is unchanged; clearing the task promotes it."),
    "record_processed": ("tonight's partitions could not be marked processed, or what the next night starts from "
                         "not recorded",
                         "Nothing is lost: clearing the task records both; otherwise the next night takes the "
                         "partitions again (reusing tonight's work) and starts from the last model it recorded."),
}
USER_ERROR_STEP = ("Fix it as the message says (the task was not retried: retrying cannot fix a configuration or "
                   "input mistake), then clear the task, or let the next night run with the fix.")


def failed_tasks(states: Mapping[str, str]) -> list[str]:
    """The tasks that ended failed, in the night's order; a mapped task's instances (``tune_trial_2``, as Airflow
    names them in a run's task states) count as the task."""
    failed = set()
    for key, state in states.items():
        head, _, index = key.rpartition("_")
        if state == "failed":
            failed.add(head if index.isdigit() and head in STAGES else key)
    return [task for task in STAGES if task in failed] + sorted(failed - STAGES.keys())


def _failed_task(states: Mapping[str, str], failures: Mapping[str, TaskFailure],
                 pointer_problems: list[str]) -> NightProblem | None:
    failed = [task for task in failed_tasks(states) if task in STAGES]
    if not failed:
        return None
    first = failed[0]
    what, step = STAGES[first]
    user_error = failures.get(first, {}).get("user_error", False)
    title = f"FAILED: {'a configuration or input mistake stopped ' + first if user_error else what}"
    reasons = [f"{task}: {failures[task]['message']}" if task in failures else f"{task} failed (see its log)"
               for task in failed]
    subject = f"FAILED, a configuration or input mistake in {first}" if user_error else f"FAILED, {what}"
    return NightProblem(kind="task_failed", severity="failed", title=title, subject=subject,
                        reasons=[*reasons, *pointer_problems], next_steps=[USER_ERROR_STEP if user_error else step])


def _corrupt_pointer(model: str, problems: list[str]) -> NightProblem:
    return NightProblem(
        kind="corrupt_pointer", severity="failed",
        title="FAILED: the production pointer is corrupt, so nothing can be promoted",
        subject="FAILED, corrupt production pointer", reasons=problems,
        next_steps=[f"See what is wrong: mavias registry show --name {model}",
                    (f"Rebuild it: mavias registry repair --name {model} (keeps its readable records, else promotes "
                     "the newest published version whose gates passed; --version V chooses one)")])


def _not_trained(results: NightResults, decision: str) -> NightProblem:
    failed = (results.get("validated") or {}).get("failed") or []
    if failed:
        return NightProblem(
            kind="data_rejected", severity="blocked", title=f"Data rejected: {len(failed)} partition(s) failed "
            "validation; nothing was trained", subject=f"data rejected ({', '.join(failed)}), nothing trained",
            reasons=[decision], next_steps=[
                f"Fix partition {name} at the source, then delete quarantine/{name}/validation.json so that the next "
                "night retries it (or relax the validation section of the nightly config)." for name in failed])
    return NightProblem(kind="nothing_new", severity="routine", title="Nothing new tonight", subject="nothing new",
                        reasons=[decision], next_steps=["Nothing to do."])


def night_problem(model: str, results: NightResults, *, trained: bool, decision: str, states: Mapping[str, str],
                  failures: Mapping[str, TaskFailure], pointer_problems: list[str]) -> NightProblem | None:
    """The night's problem headline, or None when the gates' verdict (or the promotion) is the whole story."""
    if problem := _failed_task(states, failures, pointer_problems):
        return problem
    if pointer_problems:
        return _corrupt_pointer(model, pointer_problems)
    if same := (results.get("dataset") or {}).get("same_as_production"):
        digest = results["dataset"]["digest"]
        return NightProblem(
            kind="same_as_production", severity="routine",
            title=f"Skipped: tonight's data and settings are exactly production's ({same})",
            subject=f"skipped, same data as production {same}",
            reasons=[(f"the dataset digest {digest} (data, discovery choices and training settings) is the one "
                      f"production {same} was made from: training again would publish the same model as a new "
                      "version")],
            next_steps=["Nothing to do. To train again anyway, trigger the night with full_retrain."])
    if not trained:
        return _not_trained(results, decision)
    return None
