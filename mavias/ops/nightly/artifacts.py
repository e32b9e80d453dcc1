"""What the stages of a night hand each other: small JSON dicts (Airflow XComs) of paths, URIs and counts.

Each stage function takes the :class:`~mavias.ops.nightly.config.NightlyConfig` and the artifacts of the stages before
it and returns its own; the heavy data stays in the workspace (:mod:`mavias.ops.nightly.layout`) and the bucket. The
types below are the schema of each dict, in the order a night produces them.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class NightInfo(TypedDict):
    night: str  # the logical date as %Y%m%dT%H%M%S: names the night's folders
    date: str  # ISO date


class Sensed(NightInfo):
    """``ingest.sense``: partitions to process tonight and those processed before."""

    new: list[str]
    processed: list[str]
    unsafe: NotRequired[list[str]]  # incoming folders ignored for their names, as ascii() writes them


class PartitionValidation(TypedDict):
    success: bool
    summary: str  # one line for the report
    path: str  # nights/<night>/validation/<partition>.json (ValidationResult.to_dict())


class Validated(TypedDict):
    """``ingest.pull_and_validate``: which partitions passed, and the evaluation set (pulled)."""

    night: str
    valid: list[str]
    failed: list[str]
    waiting: dict[str, str]  # partitions still uploading -> why (taken on a later night, neither valid nor failed)
    validations: dict[str, PartitionValidation]
    changed: NotRequired[dict[str, str]]  # processed partitions changed in the bucket since validated -> why (left out)
    partitions: list[str]  # processed before (less the changed) + valid tonight: the accumulated training data
    evaluation: str  # local manifest of the fixed evaluation set
    classes: list[str]


class TagJob(TypedDict):
    """One untagged shard of a partition."""

    partition: str
    manifest: str
    shard: int
    num_shards: int


TagBatch = list[TagJob]  # ``tagging_plan.plan_tagging``: the shards one mapped task tags, one unless there are many


class Tagged(TypedDict):
    """``discover.tag_shard``: the shard's :class:`~mavias.core.tagging.run.TagCounts`."""

    partition: str
    shard: int
    images_tagged: int
    images_reused: int
    images_quarantined: int
    shards_done: int
    shards_skipped: int


class Discovered(TypedDict):
    """``discover.discover``: the partitions judged and encoded tonight, and what that cost."""

    partitions: list[str]
    images_tagged: int
    llm_requests: int
    tags_judged: int
    prompts_encoded: int
    judge: str  # discovery.judge: offline or llm
    judge_failure: str | None  # why the offline judge stood in for the LLM tonight
    decisions: dict[str, dict[str, int]]  # class -> DecisionSource -> (class, tag) pairs


class Dataset(TypedDict):
    """``dataset.prepare_dataset``: the accumulated training data, prepared once (``training/<digest>/``)."""

    night: str
    digest: str
    dir: str  # training/<digest>/: dataset/, prepared-data.pt, reference/, tuning/
    partitions: list[str]
    new: list[str]  # tonight's valid partitions, marked processed by ingest.record_processed
    sizes: dict[str, int]  # images per split, and "quarantined"
    relevance_changes: str  # nights/<night>/relevance_changes.json (RelevanceChanges)
    same_as_production: NotRequired[str | None]  # production's version when it was made from this very digest


class StartPlan(TypedDict):
    """``warm.plan_start``: whether tonight's trainings start from the promoted night's models, and why."""

    mode: Literal["warm", "cold"]
    reason: str
    fraction: float  # of a cold training's steps
    from_night: str | None  # the promoted night a warm start starts from
    chain: int  # warm nights in a row of this lineage, tonight's included (0: from scratch)


class TrainedReference(TypedDict):
    """``train.train_reference_model``: the ERM reference run (its folder holds biased_tags.csv and the training
    sample ids), the candidate's recipe it resolved (a run folder's ``recipe.json``: the settings the trials start
    from), the classes, and how tonight's trainings start."""

    dir: str
    checkpoint: str
    best: dict[str, Any]
    candidate_recipe: str
    classes: list[str]
    start: StartPlan


class TrialJob(TypedDict):
    """``trial_plan.plan_trials``: one planned MAVias settings trial (a mapped task)."""

    number: int
    params: dict[str, Any]


class TrialResult(TypedDict):
    number: int
    value: float | None  # the trial's best validation criterion; None: it diverged
    diverged: NotRequired[str]  # why (the searched rate was too high for this data)


class Candidate(TypedDict):
    """``train.select_candidate``: tonight's MAVias model, the best trial."""

    dir: str
    checkpoint: str
    best: dict[str, Any]
    method: str
    selection: str
    tuning: dict[str, Any]  # chosen settings, their value, fallback, every trial


class Evaluated(TypedDict):
    """``evaluate.evaluate``: metrics.json of each model on the fixed evaluation set, and production's ETag."""

    candidate: str
    reference: str
    production: str | None
    production_version: str | None
    production_etag: str | None  # promotion succeeds only if the pointer still has it
    production_not_compared: str | None  # why production has no metrics though there is one (e.g. other classes)
    logit_summary: str  # CSV of the logit plot
    shortcut_status: NotRequired[str]  # CSV: per class, its shortcuts or why it has none (STATUS_COLUMNS)
    production_problem: NotRequired[str | None]  # a corrupt production pointer: promotion refused, the night fails
    notes: list[str]


class Gates(TypedDict):
    """The ``quality_gates`` task (QualityGateOperator): ``GateReport.to_dict()`` plus the files it judged."""

    passed: bool
    config: dict[str, Any]
    gates: list[dict[str, Any]]
    inputs: NotRequired[dict[str, Any]]


class Packaged(TypedDict):
    """``package.package``: the version folder (ONNX, checkpoint, metrics, gates, model card)."""

    version: str
    dir: str
    onnx: str
    onnx_sha256: str
    verification: dict[str, Any]  # VerificationResult.to_dict()
    latency: dict[str, Any]  # export_latency_benchmark()


class Published(TypedDict):
    version: str
    uri: str  # s3://<bucket>/models/<name>/<version>/


class Serving(TypedDict):
    inference_service: str
    uri: str
    pointed: bool
    warning: str  # what failed and the command to retry, when not pointed


class Promoted(TypedDict):
    """``release.promote``: whether production now is the version, and why not."""

    version: str
    promoted: bool
    reason: str
    uri: str
    previous: NotRequired[str | None]
    serving: NotRequired[Serving | None]  # None: no InferenceService configured
    in_production: NotRequired[bool]  # promoted tonight, or by an earlier try of this night


class Recorded(TypedDict):
    recorded: list[str]  # partitions marked processed


class NightResults(TypedDict, total=False):
    """What ``report.report`` reads: each completed stage's artifact under its name; absent when it did not run."""

    sensed: NightInfo
    validated: Validated
    planned: list[TagBatch]
    discovered: Discovered
    dataset: Dataset
    reference: TrainedReference
    candidate: Candidate
    evaluated: Evaluated
    gates: Gates
    packaged: Packaged
    published: Published
    promoted: Promoted
    recorded: Recorded


class Reported(TypedDict):
    """``report.report``: where the report is, whether it was uploaded, its queued email, the night's status line."""

    html: str
    uri: str
    uploaded: bool
    attempt: int
    queued: str | None  # the outbox name of tonight's email (``notify`` sends it); None: not mailed
    recipients: list[str]
    status: str
    promoted: bool
    version: str
    failure: NotRequired[str | None]  # the headline of a night that failed: finish fails the run with it


class Notified(TypedDict):
    sent: list[str]  # outbox names delivered
    dead_letters: list[str]  # outbox names refused for good, moved to the outbox's dead/ folder
