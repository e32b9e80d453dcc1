"""The nightly pipeline as plain functions, one per DAG task: sense, pull + validate, discover, train, evaluate,
package, publish, promote, record, report. The Airflow DAG only wires them; the library never imports Airflow.

Each step takes the :class:`NightlyConfig` and the small JSON dicts returned by the steps before it, and returns
another small dict (paths, URIs, counts), so XCom stays tiny. Steps are idempotent: run twice, they do the work
once. Heavy artifacts live in the workspace::

    partitions/<partition>/       pulled incoming partitions (manifest + images), refreshed by ETag
    evaluation/<version>/         the pulled, fixed evaluation set
    discovery/                    the mavias.discover workspace: tags, judge decisions, bias embeddings
    training/<digest>/            dataset/, prepared.pt, reference/, mavias/ -- keyed by the data and the config,
                                  so a retried or repeated night resumes or reuses instead of retraining
    production/<version>/         production checkpoints fetched to compare the candidate with
    nights/<night>/               validation/, eval/, package/<version>/, report/attempt-<n>/, relevance.parquet
                                  (the night's decisions) and relevance_changes.json (against the previous night)
    outbox/                       notification emails not sent yet (sent by the next report or notify step)
    history.json                  headline numbers of every night (mirrored to the bucket)

A night is identified by its logical date, so a rerun of the same night finds the same folders. Every name that
becomes a path (partition, version, model) is checked against one pattern first
(:func:`~mavias.pipeline.storage.check_name`), so nothing is read or written outside the workspace.

Faults: a transient storage error (timeout, refused connection, 5xx, throttling) is retried with backoff
(:func:`~mavias.pipeline.storage.retry_transient`) and then fails the step, never quarantining data; only bad data
is quarantined. The report is rendered and mailed from local state when the bucket is unreachable, and uploaded by
a later report. Each report attempt of a night is kept (``attempt-<n>``), never overwritten.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from mavias.discover import Workspace, discover_partition
from mavias.encode.base import TextEncoder
from mavias.errors import UserError
from mavias.evaluate.metrics import GROUP_TABLE_COLUMNS
from mavias.evaluate.protocols import BIASED_TAG_COLUMNS
from mavias.judging.evaluate import decision_changes
from mavias.judging.review import apply_review, load_review
from mavias.manifest import ManifestError, load_manifest, read_manifest_table
from mavias.nightly.incoming import ProcessedLedger, find_manifest, pull_partition
from mavias.pipeline.export import VerificationResult, export_latency_benchmark, export_onnx, verify_onnx
from mavias.pipeline.gates import GateReport, load_gate_config
from mavias.registry.model_card import build_model_card, lineage_from_files, write_model_card
from mavias.pipeline.nightly_config import NightlyConfig
from mavias.pipeline.notify import Delivery, Outbox, SmtpSettings, email_message
from mavias.pipeline.report import (
    DiscoveryCounts,
    HistoryEntry,
    RelevanceChanges,
    ReportContext,
    append_history,
    biased_tag_count,
    history_entry,
    history_from_document,
    load_history,
    logit_summary,
    render_email,
    write_report,
)
from mavias.pipeline.validation import CheckResult, ValidationResult, quarantine_partition, validate_manifest_file
from mavias.registry import CorruptPointer, ModelRegistry, PointerRecord, VersionExists
from mavias.registry.kubernetes import point_inference_service
from mavias.registry.storage import (
    S3Settings,
    check_name,
    download_file,
    get_json,
    is_condition_failure,
    is_transient,
    list_folders,
    make_s3_client,
    put_json,
    retry_transient,
    s3_uri,
    upload_file,
)
from mavias.relevance import RELEVANCE_COLUMNS, load_relevance, save_relevance
from mavias.tagging import Tagger, TagsStore, tag_partition
from mavias.tagging.run import TAGS_NAME, missing_shards
from mavias.train.config import TrainConfig
from mavias.train.inference import predict
from mavias.train.prepare import PreparedData, prepare_image_data
from mavias.train.trainer import load_main_model
from mavias.tune.batch import finish_batch, plan_batch, run_planned_trial
from mavias.tune.search import settings_params
from mavias.utils.atomic import atomic_path, write_json
from mavias.workflow import evaluate_checkpoint, load_reference, train_reference, write_run_evaluation

log = logging.getLogger(__name__)

NIGHT_FORMAT = "%Y%m%dT%H%M%S"
PREPARED_NAME = "prepared.pt"
SIZES_NAME = "sizes.json"
CHECKPOINT_NAME = "model.pt"
VERIFY_IMAGES = 256
LATENCY_BUDGET_S = 3.0
TRAIN_SPLITS = ("train", "val")
RELEVANCE_NAME, RELEVANCE_CHANGES_NAME = "relevance.parquet", "relevance_changes.json"


# -- workspace ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    root: Path

    def partition(self, name: str) -> Path:
        return self.root / "partitions" / check_name("partition", name)

    def evaluation(self, version: str) -> Path:
        return self.root / "evaluation" / check_name("evaluation version", version)

    @property
    def discovery(self) -> Workspace:
        return Workspace(self.root / "discovery")

    def training(self, digest: str) -> Path:
        return self.root / "training" / digest

    def production(self, version: str) -> Path:
        return self.root / "production" / check_name("version", version)

    def night(self, night: str) -> Path:
        return self.root / "nights" / check_name("night", night)

    @property
    def outbox(self) -> Outbox:
        return Outbox(self.root / "outbox")

    @property
    def history(self) -> Path:
        return self.root / "history.json"


def layout(cfg: NightlyConfig) -> Layout:
    return Layout(cfg.workspace)


def night_id(when: datetime) -> str:
    return when.strftime(NIGHT_FORMAT)


def evaluation_partition(cfg: NightlyConfig) -> str:
    """Discovery name of the evaluation set: it is tagged, judged and encoded like a partition, once per version."""
    return f"evaluation-{cfg.evaluation.version}"


def registry(cfg: NightlyConfig, client: BaseClient | None = None) -> ModelRegistry:
    return ModelRegistry(client or make_s3_client(cfg.s3), cfg.s3, cfg.model_name)


def _reports_prefix(cfg: NightlyConfig) -> str:
    return f"{cfg.s3.models_prefix}{cfg.model_name}/reports/"


# -- 1. sense -------------------------------------------------------------------------------------------------------


def sense(cfg: NightlyConfig, when: datetime, *, force_partition: str | None = None) -> dict[str, Any]:
    """New partitions (ready, neither processed nor quarantined) plus ``force_partition``, which is redone."""
    client = make_s3_client(cfg.s3)
    ledger = ProcessedLedger(client, cfg.s3)
    processed, new = ledger.processed(), set(ledger.new_partitions())
    if force_partition:
        if find_manifest(client, cfg.s3, check_name("force_partition", force_partition)) is None:
            prefix = s3_uri(cfg.s3, f"{cfg.s3.incoming_prefix}{force_partition}/")
            raise UserError(f"forced partition {force_partition!r} has no manifest under {prefix}: check the name")
        new.add(force_partition)
        processed.discard(force_partition)
    log.info("night %s: %d new partition(s) %s, %d processed before", night_id(when), len(new), sorted(new), len(processed))
    return night_info(when) | {"new": sorted(new), "processed": sorted(processed)}


def night_info(when: datetime) -> dict[str, str]:
    """The night's name and date (what the report needs when even sensing did not run)."""
    return {"night": night_id(when), "date": when.date().isoformat()}


# -- 2. pull + validate ---------------------------------------------------------------------------------------------


def pull(cfg: NightlyConfig, client: BaseClient, partition: str) -> Path:
    """:func:`pull_partition` into the workspace, retried while the bucket is unreachable."""
    return retry_transient(cfg.s3)(pull_partition, client, cfg.s3, partition, layout(cfg).partition(partition))


def pull_evaluation_set(cfg: NightlyConfig, client: BaseClient) -> Path:
    """The fixed evaluation set ``s3://<bucket>/<prefix><version>/`` (pulled like a partition, by ETag)."""
    settings = cfg.s3.model_copy(update={"incoming_prefix": cfg.evaluation.prefix})
    local = layout(cfg).evaluation(cfg.evaluation.version)
    return retry_transient(cfg.s3)(pull_partition, client, settings, cfg.evaluation.version, local)


def known_classes(cfg: NightlyConfig, evaluation_manifest: Path) -> list[str]:
    """The configured classes, else the evaluation set's: the fixed evaluation set defines the task."""
    return sorted(cfg.classes or read_manifest_table(evaluation_manifest)["label"].dropna().unique())


def _class_counts(manifest: pd.DataFrame) -> dict[str, int]:
    train = manifest[manifest["split"] == "train"] if "split" in manifest.columns else manifest.iloc[:0]
    return {str(k): int(v) for k, v in train["label"].value_counts().items()}


def _accumulated_class_counts(client: BaseClient, settings: S3Settings, processed: Iterable[str]) -> dict[str, int]:
    """Training-label counts of the processed partitions, from their ledger markers (see :func:`record_processed`)."""
    ledger = ProcessedLedger(client, settings)
    total: dict[str, int] = {}
    for partition in processed:
        marker = get_json(client, settings, f"{ledger.processed_prefix}{partition}.json")
        for label, n in (marker[0].get("class_counts", {}) if marker else {}).items():
            total[label] = total.get(label, 0) + n
    return total


def _unreadable(err: Exception) -> ValidationResult:
    return ValidationResult(False, [CheckResult("manifest_readable", False, details=str(err), source="mavias")])


def _validate_partition(
    cfg: NightlyConfig, client: BaseClient, night: str, partition: str, classes: list[str], counts: dict[str, int]
) -> dict[str, Any]:
    try:
        result = validate_manifest_file(pull(cfg, client, partition), classes, counts)
    except (ManifestError, OSError, ValueError) as err:  # an unreadable manifest is bad data, not a crash
        if is_transient(err):  # ... but an unreachable bucket is not: fail, keep the partition for a later try
            raise
        result = _unreadable(err)
    path = write_json(layout(cfg).night(night) / "validation" / f"{partition}.json", result.to_dict())
    if not result.success:
        quarantine_partition(client, cfg.s3, partition, result)
    log.info("partition %s: %s", partition, result.summary())
    return {"success": result.success, "summary": result.summary(), "path": str(path)}


def pull_and_validate(cfg: NightlyConfig, sensed: Mapping[str, Any]) -> dict[str, Any]:
    """Pull every new partition and the evaluation set; validate; quarantine the partitions that fail."""
    client = make_s3_client(cfg.s3)
    evaluation = pull_evaluation_set(cfg, client)
    classes = known_classes(cfg, evaluation)
    counts = _accumulated_class_counts(client, cfg.s3, sensed["processed"])
    validations = {p: _validate_partition(cfg, client, sensed["night"], p, classes, counts) for p in sensed["new"]}
    valid = [p for p, v in validations.items() if v["success"]]
    return {
        "night": sensed["night"],
        "valid": valid,
        "failed": [p for p, v in validations.items() if not v["success"]],
        "validations": validations,
        "partitions": sorted({*sensed["processed"], *valid}),
        "evaluation": str(evaluation),
        "classes": classes,
    }


def training_decision(validated: Mapping[str, Any], *, full_retrain: bool) -> tuple[bool, str]:
    """Whether tonight trains, and why (or why not) in one line for the report."""
    if validated["failed"]:
        return False, f"partition(s) {', '.join(validated['failed'])} failed validation: nothing was trained tonight"
    if not validated["partitions"]:
        return False, "no partition has been processed yet: nothing to train on"
    if not validated["valid"] and not full_retrain:
        return False, "no new partitions since the last run: nothing was trained tonight"
    if not validated["valid"]:
        return True, "full retrain requested without new partitions"
    return True, f"new partition(s): {', '.join(validated['valid'])}"


# -- 3. discover ----------------------------------------------------------------------------------------------------


def _is_discovered(cfg: NightlyConfig, partition: str) -> bool:
    return (layout(cfg).discovery.partition(partition) / "discovery.json").exists()


def partitions_to_discover(cfg: NightlyConfig, validated: Mapping[str, Any]) -> dict[str, str]:
    """Partition -> local manifest, for those not discovered yet: tonight's new ones, once the evaluation set, and
    any processed partition a fresh workspace has not seen."""
    client = make_s3_client(cfg.s3)
    todo = {} if _is_discovered(cfg, evaluation_partition(cfg)) else {evaluation_partition(cfg): validated["evaluation"]}
    for partition in validated["partitions"]:
        if not _is_discovered(cfg, partition):
            todo[partition] = str(pull(cfg, client, partition))
    return todo


def plan_tagging(cfg: NightlyConfig, validated: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The untagged shards of the partitions to discover, one job each (shards committed earlier are done)."""
    n = cfg.discovery.num_shards
    jobs = [
        {"partition": name, "manifest": path, "shard": index, "num_shards": n}
        for name, path in partitions_to_discover(cfg, validated).items()
        for index in missing_shards(layout(cfg).discovery.tags / name, n)
    ]
    log.info("tagging: %d shard(s) to tag", len(jobs))
    return jobs


def make_tagger(cfg: NightlyConfig) -> Tagger:
    from mavias.tagging.cli import make_tagger as make
    from mavias.tagging.defaults import OPENCLIP_MODEL, OPENCLIP_PRETRAINED, TAG_THRESHOLD, TAG_TOP_K

    if ":" in cfg.discovery.tagger:  # a custom tagger: "package.module:factory"
        module, factory = cfg.discovery.tagger.split(":")
        return getattr(importlib.import_module(module), factory)()
    return make(
        cfg.discovery.tagger, model=OPENCLIP_MODEL, pretrained=OPENCLIP_PRETRAINED, threshold=TAG_THRESHOLD,
        top_k=TAG_TOP_K,
    )


def make_encoder(cfg: NightlyConfig) -> TextEncoder:
    """The training config's ``encoder`` (as for ``mavias train``): one setting for discovery and training."""
    from mavias.encode.cli import encoder_from_spec

    return encoder_from_spec(cfg.train.resolve().encoder)


def tag_shard(cfg: NightlyConfig, job: Mapping[str, Any]) -> dict[str, Any]:
    """Tag one shard of one partition; a shard committed before (by a killed or earlier attempt) is skipped."""
    manifest = Path(job["manifest"])
    counts = tag_partition(
        load_manifest(manifest, check_files=False),
        manifest.parent,
        make_tagger(cfg),
        layout(cfg).discovery.tags / job["partition"],
        shard=(job["shard"], job["num_shards"]),
        store=TagsStore(layout(cfg).discovery.tags),
        batch_size=cfg.discovery.batch_size,
        progress=False,
    )
    log.info("partition %s shard %d/%d: %s", job["partition"], job["shard"], job["num_shards"], counts)
    return {"partition": job["partition"], "shard": job["shard"], **asdict(counts)}


def discover(
    cfg: NightlyConfig, validated: Mapping[str, Any], tagged: Iterable[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """Judge and encode the partitions to discover (their shards are tagged by now); what tonight cost."""
    totals = {"images_tagged": sum(t["images_tagged"] for t in tagged or []), "llm_requests": 0, "tags_judged": 0,
              "prompts_encoded": 0}
    partitions = partitions_to_discover(cfg, validated)
    if partitions:
        from mavias.discover.cli import make_judge

        tagger, judge, encoder = make_tagger(cfg), make_judge(cfg.discovery.judge), make_encoder(cfg)
        for name, manifest in partitions.items():
            counts = discover_partition(
                manifest, layout(cfg).discovery.root, tagger, judge, encoder, name=name,
                num_shards=cfg.discovery.num_shards, batch_size=cfg.discovery.batch_size, progress=False,
            )
            for key in ("llm_requests", "tags_judged", "prompts_encoded"):
                totals[key] += getattr(counts, key)
    log.info("discovery of %s: %s", sorted(partitions) or "nothing new", totals)
    return {"partitions": sorted(partitions), **totals}


# -- 4. dataset + training ------------------------------------------------------------------------------------------


def _discovered_tables(cfg: NightlyConfig, names: Iterable[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tags, relevance) over the partitions, one decision per (class, tag), reviewed decisions winning."""
    ws = layout(cfg).discovery
    tags = pd.concat([pd.read_parquet(ws.tags / name / TAGS_NAME) for name in names], ignore_index=True)
    relevance = pd.concat([pd.read_parquet(ws.partition(name) / RELEVANCE_NAME) for name in names])
    relevance = relevance[RELEVANCE_COLUMNS].drop_duplicates(["class", "tag"]).reset_index(drop=True)
    if cfg.discovery.review is not None:
        relevance = apply_review(relevance, load_review(cfg.discovery.review))
    return tags.drop_duplicates(["sample_id", "tag"]), relevance


def _previous_relevance(cfg: NightlyConfig, night: str) -> Path | None:
    """The relevance table of the latest night before ``night`` that recorded one (a night that judged)."""
    earlier = [path for path in (layout(cfg).root / "nights").glob(f"*/{RELEVANCE_NAME}") if path.parent.name < night]
    return max(earlier, key=lambda path: path.parent.name, default=None)


def record_relevance_changes(cfg: NightlyConfig, night: str, relevance: pd.DataFrame) -> Path:
    """Save the night's relevance table and ``relevance_changes.json`` (:class:`RelevanceChanges`): its decisions
    against the previous night that recorded a table. A rerun of the night compares with the same night again."""
    folder = layout(cfg).night(night)
    tonight = save_relevance(relevance, folder / RELEVANCE_NAME)
    previous = _previous_relevance(cfg, night)
    changes = RelevanceChanges(
        night=night, previous_night=previous.parent.name if previous else None, relevance=str(tonight),
        review=str(cfg.discovery.review) if cfg.discovery.review else None,
        classes=decision_changes(load_relevance(previous), relevance) if previous else {},
    )
    log.info("relevance decisions: %d class(es) changed since night %s", len(changes.classes), changes.previous_night)
    return write_json(folder / RELEVANCE_CHANGES_NAME, changes.model_dump(mode="json"))


def _absolute(manifest_path: Path) -> pd.DataFrame:
    frame = load_manifest(manifest_path, check_files=False).drop(columns=["tags"], errors="ignore")
    return frame.assign(uri=[str(manifest_path.parent / uri) for uri in frame["uri"]])


def accumulated_manifest(partition_manifests: Iterable[Path], evaluation_manifest: Path) -> pd.DataFrame:
    """Train/val rows of every partition (first occurrence of an image wins, evaluation images excluded) plus the
    evaluation set as the ``test`` split; uris are absolute."""
    test = _absolute(evaluation_manifest).assign(split="test")
    parts = [_absolute(path) for path in partition_manifests]
    train = pd.concat(parts, ignore_index=True) if parts else test.iloc[:0]
    train = train[train["split"].isin(TRAIN_SPLITS) & ~train["sample_id"].isin(test["sample_id"])]
    return pd.concat([train.drop_duplicates("sample_id"), test], ignore_index=True)


def _digest(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        text = part.to_csv(index=False) if isinstance(part, pd.DataFrame) else json.dumps(part, sort_keys=True, default=str)
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def dataset_digest(cfg: NightlyConfig, manifest: pd.DataFrame, tags: pd.DataFrame, relevance: pd.DataFrame,
                   salt: str = "") -> str:
    """Identity of a training run: the data (not where it lies), the discovery choices and the training config."""
    rows = manifest[["sample_id", "label", "split"]].sort_values("sample_id")
    tag_rows = tags[tags["sample_id"].isin(manifest["sample_id"])][["sample_id", "tag"]].sort_values(["sample_id", "tag"])
    decisions = relevance[["class", "tag", "relevant"]].sort_values(["class", "tag"])
    choices = {"train": cfg.train.resolve().model_dump(mode="json"), "discovery": cfg.discovery.model_dump(), "salt": salt}
    return _digest(rows, tag_rows, decisions, choices)


def save_prepared(data: PreparedData, path: Path) -> Path:
    with atomic_path(path) as tmp:
        torch.save(data, tmp)
    return path


def load_prepared(dataset: Mapping[str, Any]) -> PreparedData:
    # Our own file in our own workspace, written by save_prepared: a pickle of the prepared splits.
    return torch.load(Path(dataset["dir"]) / PREPARED_NAME, weights_only=False)


def prepare_dataset(cfg: NightlyConfig, validated: Mapping[str, Any], *, full_retrain: bool = False) -> dict[str, Any]:
    """Accumulated training data (all processed + tonight's partitions) with the evaluation set as ``test``,
    prepared once (images decoded, bias embeddings attached) for the training and evaluation steps."""
    client = make_s3_client(cfg.s3)
    partitions = validated["partitions"]
    manifests = [pull(cfg, client, p) for p in partitions]
    manifest = accumulated_manifest(manifests, Path(validated["evaluation"]))
    tags, relevance = _discovered_tables(cfg, [*partitions, evaluation_partition(cfg)])
    changes = record_relevance_changes(cfg, validated["night"], relevance)
    digest = dataset_digest(cfg, manifest, tags, relevance, salt=validated["night"] if full_retrain else "")
    out = layout(cfg).training(digest)
    if not (out / PREPARED_NAME).exists():
        with atomic_path(out / "dataset" / "manifest.parquet") as tmp:
            manifest.to_parquet(tmp, index=False)
        with atomic_path(out / "dataset" / "relevance.parquet") as tmp:
            relevance.to_parquet(tmp, index=False)
        with atomic_path(out / "dataset" / "tags.parquet") as tmp:
            tags.to_parquet(tmp, index=False)
        encoder = make_encoder(cfg)
        data = prepare_image_data(
            out / "dataset" / "manifest.parquet", relevance=relevance, encoder=encoder,
            store_dir=layout(cfg).discovery.embeddings(encoder.encoder_id), config=cfg.train.resolve(),
            tags_table=tags,
            quarantine_csv=out / "dataset" / "quarantine.csv", progress=False,
        )
        sizes = {name: len(split) for name, split in data.splits.items()} | {"quarantined": len(data.quarantined)}
        write_json(out / "dataset" / SIZES_NAME, sizes)
        save_prepared(data, out / PREPARED_NAME)  # last: its presence marks the dataset complete
    sizes = json.loads((out / "dataset" / SIZES_NAME).read_text())
    log.info("dataset %s: %s from %d partition(s)", digest, sizes, len(partitions))
    return {"night": validated["night"], "digest": digest, "dir": str(out), "partitions": partitions,
            "new": validated["valid"], "sizes": sizes, "relevance_changes": str(changes)}


def train_reference_model(cfg: NightlyConfig, dataset: Mapping[str, Any]) -> dict[str, Any]:
    """The ERM reference of the open-set protocol (resumes from its last epoch; a finished run is reused)."""
    out = Path(dataset["dir"]) / "reference"
    reference = train_reference(load_prepared(dataset), cfg.train.resolve(), out, progress=False)
    return {"dir": str(out), "checkpoint": str(reference.checkpoint), "best": reference.run.best if reference.run else {}}


# -- 4b. MAVias settings search: plan, one mapped task per trial, select --------------------------------------------
TUNING_DIR = "tuning"
PREVIOUS_BEST = "best_params.json"


def _candidate_base(cfg: NightlyConfig) -> TrainConfig:
    return cfg.train.resolve().model_copy(update={"method": "mavias"})


def plan_trials(cfg: NightlyConfig, dataset: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Tonight's trials: one trial is exactly the configured settings; with more, the previous night's best settings
    (else the configured ones) come first, then TPE's picks."""
    base = _candidate_base(cfg)
    previous = layout(cfg).root / TUNING_DIR / PREVIOUS_BEST
    searching = cfg.train.tune_trials > 1 and previous.exists()
    warm = json.loads(previous.read_text()) if searching else settings_params(base)
    return plan_batch(Path(dataset["dir"]) / TUNING_DIR, base, cfg.train.tune_trials, batch=dataset["night"],
                      warm_start=warm)


def run_trial(cfg: NightlyConfig, dataset: Mapping[str, Any], reference: Mapping[str, Any],
              job: Mapping[str, Any]) -> dict[str, Any]:
    """Train one planned trial on the accumulated data (resumable; a finished trial is reused)."""
    data = load_prepared(dataset)
    return run_planned_trial(data, load_reference(reference["dir"], data), _candidate_base(cfg),
                             Path(dataset["dir"]) / TUNING_DIR, dict(job))


def select_candidate(cfg: NightlyConfig, dataset: Mapping[str, Any], trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The trial with the best validation criterion becomes the candidate; its settings warm-start the next night."""
    selection = _candidate_base(cfg).selection
    tuned = finish_batch(Path(dataset["dir"]) / TUNING_DIR, trials, selection)
    with atomic_path(layout(cfg).root / TUNING_DIR / PREVIOUS_BEST) as tmp:
        tmp.write_text(json.dumps(tuned.best_params))
    summary = json.loads((tuned.best_dir / "train_summary.json").read_text())
    params = [f"params_{name}" for name in tuned.best_params]
    rows = [{"number": int(row["number"]), "value": None if pd.isna(row["value"]) else float(row["value"]),
             "state": str(row["state"]), "params": {p.removeprefix("params_"): row[p] for p in params}}
            for _, row in tuned.trials.iterrows()]
    return {"dir": str(tuned.best_dir), "checkpoint": str(tuned.best_dir / f"best_{selection}.pt"),
            "best": summary["best"], "method": "mavias", "selection": selection,
            "tuning": {"chosen": tuned.best_params, "value": tuned.best_value, "fallback": tuned.selection_fallback,
                       "trials": json.loads(json.dumps(rows, default=float))}}


# -- 5. evaluate ----------------------------------------------------------------------------------------------------


def _production_checkpoint(cfg: NightlyConfig, client: BaseClient, version: str) -> Path:
    reg = registry(cfg, client)
    path = layout(cfg).production(version) / CHECKPOINT_NAME
    if not path.exists():
        download_file(client, cfg.s3, f"{reg.prefix}{version}/{CHECKPOINT_NAME}", path)
    return path


def _logit_summaries(data: PreparedData, reference_dir: Path, checkpoints: Mapping[str, str | Path]) -> pd.DataFrame:
    """Mean training-sample logits by bias strength, per model (the paper's logit plot)."""
    biased = pd.read_csv(reference_dir / "biased_tags.csv", keep_default_na=False)
    rows = []
    for name, checkpoint in checkpoints.items():
        pred = predict(load_main_model(checkpoint)[0], data["train"])
        strength = biased_tag_count(pred["label_name"], pred["irrelevant_tags"], biased)
        rows.append(logit_summary(pred, strength, model=name))
    return pd.concat(rows, ignore_index=True)


def _production_and_etag(cfg: NightlyConfig, client: BaseClient, notes: list[str]) -> tuple[PointerRecord | None, str | None]:
    """Production and the pointer's ETag; a corrupt pointer is a note (promotion then refuses), not a crash."""
    reg = registry(cfg, client)
    try:
        return reg.production(), reg.pointer_etag()
    except CorruptPointer as err:
        notes.append(str(err))
        return None, None


def evaluate(
    cfg: NightlyConfig, dataset: Mapping[str, Any], reference: Mapping[str, Any], candidate: Mapping[str, Any]
) -> dict[str, Any]:
    """Candidate, ERM reference and current production model on the fixed evaluation set, with the same groups.

    Records the production pointer's ETag: promotion later succeeds only if production has not changed since.
    """
    client = make_s3_client(cfg.s3)
    data = load_prepared(dataset)
    ref = load_reference(reference["dir"], data)
    out = layout(cfg).night(dataset["night"]) / "eval"

    def run(role: str, checkpoint: str | Path) -> str:
        result = evaluate_checkpoint(data, checkpoint, ref, closed_set_attrs=cfg.evaluation.closed_set_attrs or None,
                                     n_boot=cfg.evaluation.n_boot)
        return str(write_run_evaluation(out / role, result) / "metrics.json")

    metrics = {"candidate": run("candidate", candidate["checkpoint"]), "reference": run("reference", ref.checkpoint)}
    notes: list[str] = []
    production, pointer_etag = _production_and_etag(cfg, client, notes)
    if production is not None:
        try:
            metrics["production"] = run("production", _production_checkpoint(cfg, client, production.version))
        except ValueError as err:  # e.g. production was trained on other classes: not comparable
            notes.append(f"production {production.version} not compared: {err}")
    summary = _logit_summaries(data, Path(reference["dir"]), {"ERM reference": ref.checkpoint,
                                                                "MAVias": candidate["checkpoint"]})
    with atomic_path(out / "logit_summary.csv") as tmp:
        summary.to_csv(tmp, index=False)
    return {
        "candidate": metrics["candidate"],
        "reference": metrics["reference"],
        "production": metrics.get("production"),
        "production_version": production.version if production else None,
        "production_etag": pointer_etag,
        "logit_summary": str(out / "logit_summary.csv"),
        "notes": notes,
    }


# -- 6. package -----------------------------------------------------------------------------------------------------


def model_version(dataset: Mapping[str, Any]) -> str:
    """One version per night and dataset: a rerun of the night publishes (and promotes) nothing twice."""
    return f"{dataset['night']}-{dataset['digest'][:8]}"


def _held_out_images(data: PreparedData, limit: int = VERIFY_IMAGES) -> torch.Tensor:
    inputs = data["test"].inputs
    return torch.stack([inputs[i] for i in range(min(limit, len(inputs)))])


def package(
    cfg: NightlyConfig,
    dataset: Mapping[str, Any],
    candidate: Mapping[str, Any],
    evaluated: Mapping[str, Any],
    gates: Mapping[str, Any],
) -> dict[str, Any]:
    """The version folder: ONNX of backbone + head (verified against PyTorch), checkpoint, metrics, gates, card."""
    version = model_version(dataset)
    out = layout(cfg).night(dataset["night"]) / "package" / version
    model, classes, train_cfg = load_main_model(candidate["checkpoint"])
    onnx_path = export_onnx(model, out / "model.onnx", image_size=train_cfg.image_size)
    verification = verify_onnx(onnx_path, model, _held_out_images(load_prepared(dataset)))
    latency = export_latency_benchmark(model, train_cfg.image_size, runs=cfg.report.latency_runs, budget_s=LATENCY_BUDGET_S)
    shutil.copyfile(candidate["checkpoint"], out / CHECKPOINT_NAME)
    write_json(out / "classes.json", classes)
    write_json(out / "latency.json", latency)
    write_json(out / "gates.json", dict(gates))
    shutil.copyfile(evaluated["candidate"], out / "metrics.json")
    dataset_dir = Path(dataset["dir"]) / "dataset"
    lineage = lineage_from_files(
        dataset["partitions"], {name: dataset_dir / f"{name}.parquet" for name in ("manifest", "tags", "relevance")}
    )
    card = build_model_card(
        name=cfg.model_name, version=version, classes=classes, onnx_path=onnx_path, verification=verification,
        evaluation=json.loads(Path(evaluated["candidate"]).read_text()), gates=GateReport.from_dict(gates),
        train_config=train_cfg, lineage=lineage,
    )
    write_model_card(out / "model_card.json", card)
    log.info("packaged %s: ONNX max |diff| %.2e, latency %s", version, verification.max_abs_diff, latency["results"])
    return {"version": version, "dir": str(out), "onnx": str(onnx_path), "onnx_sha256": card["onnx"]["sha256"],
            "verification": verification.to_dict(), "latency": latency}


# -- 7. publish + promote -------------------------------------------------------------------------------------------


def publish(cfg: NightlyConfig, packaged: Mapping[str, Any]) -> dict[str, Any]:
    """Upload the version folder to ``models/<name>/<version>/`` (immutable; a rerun finds it published)."""
    reg = registry(cfg)
    version = packaged["version"]
    try:
        uri = reg.publish_version(packaged["dir"], version)
    except VersionExists:
        if version not in reg.versions():
            raise
        log.info("%s was published before (rerun of the night)", version)
        uri = reg.version_uri(version)
    return {"version": version, "uri": uri}


def promote(cfg: NightlyConfig, published: Mapping[str, Any], evaluated: Mapping[str, Any]) -> dict[str, Any]:
    """Point production at the version, atomically, unless production changed since it was evaluated; then point
    the configured InferenceService at it (also on a rerun that finds it in production already)."""
    reg = registry(cfg)
    version = published["version"]
    try:
        current = reg.production()
    except CorruptPointer as err:
        return {"version": version, "promoted": False, "reason": f"not promoted: {err}", "uri": published["uri"]}
    if current is not None and current.version == version:
        return {"version": version, "promoted": False, "reason": f"{version} was already in production (rerun)",
                "uri": published["uri"], "serving": point_serving(cfg, reg, version)}
    if reg.promote(version, evaluated["production_etag"]):
        log.info("model %s: %s is production", cfg.model_name, version)
        return {"version": version, "promoted": True, "previous": evaluated["production_version"], "reason": "",
                "uri": published["uri"], "serving": point_serving(cfg, reg, version)}
    reason = "production changed after tonight's evaluation (a concurrent promotion or rollback won): not promoted"
    return {"version": version, "promoted": False, "reason": reason, "uri": published["uri"]}


def point_serving(cfg: NightlyConfig, reg: ModelRegistry, version: str) -> dict[str, Any] | None:
    """Point ``cfg.serving.inference_service`` (if any) at production ``version``. A failure is recorded in the
    result's ``warning`` (with the command to retry), never raised: the promotion stands."""
    target = cfg.serving.inference_service
    if target is None:
        return None
    uri = reg.version_uri(version)
    try:
        point_inference_service(target, uri, retry_s=cfg.serving.retry_s)
    except Exception as err:  # noqa: BLE001 - whatever the Kubernetes API does, the promotion must stand
        warning = (f"serving NOT updated: production is {version}, but InferenceService {target} could not be "
                   f"pointed at it and still serves the previous version: {err}. "
                   f"Retry: {target.point_command(cfg.model_name, version)}")
        log.error("%s", warning, exc_info=not isinstance(err, UserError))
        return {"inference_service": str(target), "uri": uri, "pointed": False, "warning": warning}
    return {"inference_service": str(target), "uri": uri, "pointed": True, "warning": ""}


def serving_problem(promoted: Mapping[str, Any] | None) -> str | None:
    """The warning of a promotion whose InferenceService was not pointed at it, else ``None``."""
    serving = (promoted or {}).get("serving")
    return serving["warning"] if serving and not serving["pointed"] else None


def record_processed(cfg: NightlyConfig, dataset: Mapping[str, Any]) -> dict[str, Any]:
    """Mark tonight's new partitions processed, with their training-label counts for the next drift check."""
    ledger = ProcessedLedger(make_s3_client(cfg.s3), cfg.s3)
    for partition in dataset["new"]:
        manifest = read_manifest_table(pull(cfg, ledger.client, partition))
        ledger.mark_processed(partition, {"night": dataset["night"], "class_counts": _class_counts(manifest)})
    return {"recorded": list(dataset["new"])}


# -- 8. report ------------------------------------------------------------------------------------------------------

CANDIDATE_STEPS = ("planned", "discovered", "dataset", "reference", "candidate", "evaluated", "gates", "packaged")


def _empty_groups() -> pd.DataFrame:
    return pd.DataFrame(columns=GROUP_TABLE_COLUMNS)


def _candidate_tables(results: Mapping[str, Any], gates: GateReport) -> dict[str, Any]:
    evaluated, reference = results["evaluated"], results["reference"]
    source = gates.config.wg_source

    def groups(role: str) -> pd.DataFrame:
        return pd.read_csv(Path(evaluated[role]).parent / f"groups_{source}.csv", keep_default_na=False)

    return {
        "candidate_groups": groups("candidate"),
        "reference_groups": groups("reference"),
        "biased_tags": pd.read_csv(Path(reference["dir"]) / "biased_tags.csv", keep_default_na=False),
        "logit_summary": pd.read_csv(evaluated["logit_summary"], dtype={"bias_strength": str}),
    }


def _notes(results: Mapping[str, Any], trained: bool, decision: str, skip_promotion: bool) -> list[str]:
    if not trained:
        return [decision]
    stopped = next((step for step in CANDIDATE_STEPS if results.get(step) is None), None)
    notes = [f"the run stopped at '{stopped}' (a task failed, see its log): no candidate tonight"] if stopped else []
    notes += (results.get("evaluated") or {}).get("notes", [])
    promoted = results.get("promoted")
    if promoted and not promoted["promoted"]:
        notes.append(promoted["reason"])
    if problem := serving_problem(promoted):
        notes.append(problem)
    if results.get("published") and promoted is None and skip_promotion:
        notes.append("promotion skipped on request (skip_promotion); the version is published")
    return notes


def _history_entry(results: Mapping[str, Any], context: ReportContext) -> HistoryEntry:
    return history_entry(
        night=results["sensed"]["date"], run_id=context.run_id, version=context.version,
        evaluation=json.loads(Path(results["evaluated"]["candidate"]).read_text()),
        wg_source=context.gates.config.wg_source, biased_tags=context.biased_tags, promoted=context.promoted,
    )


def _synced_history(cfg: NightlyConfig, client: BaseClient, entry: HistoryEntry | None) -> list[HistoryEntry]:
    """The bucket's history merged into the workspace's (a night recorded while the bucket was unreachable is
    kept) plus tonight's entry, saved in the workspace and the bucket."""
    key = f"{_reports_prefix(cfg)}history.json"
    remote = get_json(client, cfg.s3, key)
    entries = history_from_document(remote[0], s3_uri(cfg.s3, key)) if remote is not None else []
    nights = append_history(layout(cfg).history, *entries, *([entry] if entry else []))
    put_json(client, cfg.s3, key, json.loads(layout(cfg).history.read_text()))
    return nights


def _offline_history(cfg: NightlyConfig, entry: HistoryEntry | None) -> list[HistoryEntry]:
    return append_history(layout(cfg).history, entry) if entry else load_history(layout(cfg).history)


def _unreachable(err: Exception, what: str) -> str:
    """A note for the report, or ``err`` raised again when it is not a transient storage failure."""
    if not is_transient(err):
        raise err
    log.warning("%s: the bucket is unreachable (%s)", what, err)
    return f"{what}: the bucket was unreachable ({type(err).__name__}); this report was made from local state " \
           "and is uploaded by a later report"


def _production_version(cfg: NightlyConfig, client: BaseClient, notes: list[str]) -> str | None:
    try:
        production = registry(cfg, client).production()
    except CorruptPointer as err:
        notes.append(str(err))
        return None
    except Exception as err:  # noqa: BLE001 - _unreachable re-raises what is not transient
        notes.append(_unreachable(err, "production model unknown"))
        return None
    return production.version if production else None


def _relevance_changes(results: Mapping[str, Any]) -> RelevanceChanges | None:
    """Tonight's relevance changes, when the dataset step recorded them."""
    path = (results.get("dataset") or {}).get("relevance_changes")
    return RelevanceChanges.model_validate_json(Path(path).read_text()) if path else None


def build_report_context(
    cfg: NightlyConfig,
    results: Mapping[str, Any],
    *,
    trained: bool,
    decision: str,
    skip_promotion: bool,
    production_version: str | None,
    notes: Iterable[str] = (),
) -> tuple[ReportContext, HistoryEntry | None]:
    """The report of whatever steps completed (``results``: step name -> its result, absent when it did not run)."""
    night = results["sensed"]["night"]
    validated = results.get("validated") or {}
    validations = {p: json.loads(Path(v["path"]).read_text()) for p, v in validated.get("validations", {}).items()}
    has_candidate = results.get("gates") is not None and results.get("packaged") is not None
    gates = GateReport.from_dict(results["gates"]) if has_candidate else GateReport(load_gate_config(cfg.gates), [])
    tables = _candidate_tables(results, gates) if has_candidate else {
        "candidate_groups": _empty_groups(), "reference_groups": _empty_groups(),
        "biased_tags": pd.DataFrame(columns=BIASED_TAG_COLUMNS),
    }
    packaged, promoted, discovered = results.get("packaged") or {}, results.get("promoted"), results.get("discovered")
    context = ReportContext(
        model_name=cfg.model_name,
        version=packaged.get("version", f"{night} (no candidate)"),
        run_id=night,
        created=datetime.now(UTC),
        promoted=bool(promoted and promoted["promoted"]),
        serving_updated=serving_problem(promoted) is None,
        production_version=production_version,
        model_uri=(results.get("published") or {}).get("uri"),
        notes=[*_notes(results, trained, decision, skip_promotion), *notes],
        gates=gates,
        validations=validations,
        discovery=DiscoveryCounts(images_tagged=discovered["images_tagged"], llm_requests=discovered["llm_requests"],
                                  encodings=discovered["prompts_encoded"]) if discovered else None,
        verification=VerificationResult.from_dict(packaged["verification"])
        if packaged else None,
        onnx_sha256=packaged.get("onnx_sha256"),
        latency=packaged.get("latency"),
        tuning=(results.get("candidate") or {}).get("tuning"),
        relevance_changes=_relevance_changes(results),
        **tables,
    )
    return context, _history_entry(results, context) if has_candidate else None


# -- report attempts: one folder per report of a night, never overwritten --------------------------------------------

ATTEMPT_PREFIX = "attempt-"
OUTCOME_NAME = "outcome.json"
UPLOADED_SUFFIX = ".uploaded"


def _attempt_number(name: str) -> int | None:
    number = name.removeprefix(ATTEMPT_PREFIX)
    return int(number) if name.startswith(ATTEMPT_PREFIX) and number.isdigit() else None


def _next_attempt(cfg: NightlyConfig, client: BaseClient, night: str, notes: list[str]) -> int:
    """One more than any attempt of the night in the workspace or (when reachable) in the bucket."""
    local = [_attempt_number(p.name) for p in (layout(cfg).night(night) / "report").glob(f"{ATTEMPT_PREFIX}*")]
    try:
        remote = [_attempt_number(name) for name in list_folders(client, cfg.s3, f"{_reports_prefix(cfg)}{night}/")]
    except Exception as err:  # noqa: BLE001 - _unreachable re-raises what is not transient
        notes.append(_unreachable(err, "earlier reports of this night not checked"))
        remote = []
    return 1 + max((n for n in [*local, *remote] if n is not None), default=0)


def _original_outcome(cfg: NightlyConfig, night: str) -> str | None:
    first = layout(cfg).night(night) / "report" / f"{ATTEMPT_PREFIX}1" / OUTCOME_NAME
    return json.loads(first.read_text())["subject"] if first.exists() else None


def _upload_new(client: BaseClient, settings: S3Settings, path: Path, key: str) -> None:
    try:
        upload_file(client, settings, path, key, if_none_match=True)
    except ClientError as err:
        if not is_condition_failure(err):  # present already: uploaded by an interrupted earlier try
            raise


def upload_pending_reports(cfg: NightlyConfig, client: BaseClient) -> list[str]:
    """Upload every report attempt of the workspace not uploaded yet (tonight's and those made while the bucket
    was unreachable); each file is created once, never overwritten. Returns the prefixes uploaded."""
    uploaded = []
    for folder in sorted((layout(cfg).root / "nights").glob(f"*/report/{ATTEMPT_PREFIX}*")):
        marker = folder.with_name(folder.name + UPLOADED_SUFFIX)
        if not folder.is_dir() or marker.exists():
            continue
        prefix = f"{_reports_prefix(cfg)}{folder.parent.parent.name}/{folder.name}/"
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            _upload_new(client, cfg.s3, path, prefix + path.relative_to(folder).as_posix())
        marker.touch()
        uploaded.append(prefix)
    return uploaded


def deliver_notifications(cfg: NightlyConfig, smtp: SmtpSettings | None) -> Delivery:
    """Send every queued notification email (tonight's and any an earlier night could not send)."""
    outbox = layout(cfg).outbox
    if smtp is None:
        return Delivery(failed={name: "no SMTP settings" for name in outbox.pending()})
    return outbox.deliver(smtp)


class NotificationFailed(RuntimeError):
    """Notification emails stayed queued after the SMTP retries; they are sent by a later try or night."""


def notify(cfg: NightlyConfig, smtp: SmtpSettings | None) -> dict[str, Any]:
    """Send the queued notifications; :class:`NotificationFailed` when any is still queued (nothing is lost)."""
    delivery = deliver_notifications(cfg, smtp)
    if delivery.failed:
        raise NotificationFailed(
            f"{len(delivery.failed)} notification(s) not sent, kept in {layout(cfg).outbox.folder} for the next try "
            f"or night: {delivery.failed}"
        )
    return {"sent": delivery.sent}


def report(
    cfg: NightlyConfig,
    results: Mapping[str, Any],
    *,
    trained: bool,
    decision: str,
    skip_promotion: bool = False,
    smtp: SmtpSettings | None = None,
) -> dict[str, Any]:
    """Render the night's HTML report from whatever steps completed as a new attempt
    (``nights/<night>/report/attempt-<n>/``, uploaded to ``models/<name>/reports/<night>/attempt-<n>/``), queue its
    email and send the outbox. The bucket being unreachable or SMTP failing loses nothing: the report is made from
    local state and uploaded later, the email stays queued (``status`` says so)."""
    client = make_s3_client(cfg.s3)
    night = results["sensed"]["night"]
    notes: list[str] = []
    attempt = _next_attempt(cfg, client, night, notes)
    production = _production_version(cfg, client, notes)
    context, entry = build_report_context(cfg, results, trained=trained, decision=decision,
                                          skip_promotion=skip_promotion, production_version=production, notes=notes)
    try:
        history = _synced_history(cfg, client, entry)
    except Exception as err:  # noqa: BLE001 - _unreachable re-raises what is not transient
        notes = [_unreachable(err, "history not synchronised")]
        history = _offline_history(cfg, entry)
    else:
        notes = []
    context = context.model_copy(update={
        "history": history, "attempt": attempt, "notes": [*context.notes, *notes],
        "original_outcome": _original_outcome(cfg, night) if attempt > 1 else None,
    })
    folder = layout(cfg).night(night) / "report" / f"{ATTEMPT_PREFIX}{attempt}"
    html = write_report(folder, context)
    email = render_email(context)
    write_json(folder / OUTCOME_NAME, {"subject": email.subject, "promoted": context.promoted,
                                       "version": context.version})
    try:
        uploaded = bool(upload_pending_reports(cfg, client))
    except Exception as err:  # noqa: BLE001 - _unreachable re-raises what is not transient
        _unreachable(err, "report not uploaded")
        uploaded = False
    name = f"{night}-{ATTEMPT_PREFIX}{attempt}"
    if cfg.report.recipients and smtp is not None:
        layout(cfg).outbox.put(name, email_message(email, cfg.report.recipients, smtp.from_addr))
    elif cfg.report.recipients:
        log.warning("report not emailed: no SMTP settings (configure the Airflow SMTP connection)")
    delivery = deliver_notifications(cfg, smtp) if smtp is not None else Delivery()
    notified = name in delivery.sent
    status = ("promoted" if context.promoted else "not promoted") + (
        "" if context.serving_updated else ", serving not updated") + (
        ", notification failed (queued)" if name in delivery.failed else "")
    key = f"{_reports_prefix(cfg)}{night}/{folder.name}/{html.name}"
    return {"html": str(html), "uri": s3_uri(cfg.s3, key), "uploaded": uploaded, "attempt": attempt,
            "emailed_to": list(cfg.report.recipients) if notified else [], "status": status,
            "promoted": context.promoted, "version": context.version}
