"""What the night's report shows, gathered from whatever stages completed (:func:`build_report_context`): the
candidate's group tables, B' with its evidence and each class's status, the open-set and closed-set worst groups
side by side, and the night's problem when it is not a plain gate verdict (:mod:`mavias.ops.nightly.outcome`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from mavias.core.evaluate.explain import trust_lines
from mavias.core.evaluate.metrics import GROUP_TABLE_COLUMNS, MIN_SUPPORT
from mavias.core.evaluate.shortcuts import SHORTCUT_COLUMNS
from mavias.core.judging.base import OFFLINE_SOURCE
from mavias.core.judging.factory import describe_judge
from mavias.core.judging.names import CLASS_NAME_SOURCE
from mavias.core.judging.review import REVIEW_SOURCE
from mavias.core.manifest.io import resolve_uri
from mavias.core.protocol.reference_files import rule_version
from mavias.core.relevance import irrelevant_tags
from mavias.core.tagging.base import tag_lists
from mavias.core.train.config import method_name
from mavias.errors import UserError
from mavias.ops.export.verification import VerificationResult
from mavias.ops.gates import DEFAULT_GATES_PATH, GateConfig, GateReport, load_gate_config
from mavias.ops.nightly import warm
from mavias.ops.nightly.artifacts import NightResults
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.failures import read_failures
from mavias.ops.nightly.outcome import failed_tasks, night_problem
from mavias.ops.nightly.release import serving_problem
from mavias.ops.reporting.context import DiscoveryCounts, RelevanceChanges, ReportContext
from mavias.ops.reporting.examples import Example, shortcut_examples
from mavias.ops.reporting.history import HistoryEntry, history_entry
from mavias.utils.csvfile import read_csv

DECISION_SOURCE_COLUMNS = ["llm", "offline", "review", "own_name", "tonight_judge", "tonight_cache",
                           "tonight_fallback", "tonight_withheld"]
CANDIDATE_STEPS = ("planned", "discovered", "dataset", "reference", "candidate", "evaluated", "gates", "packaged")
PROTOCOLS = {"open_set": "open-set (label-free: the reference's B')", "closed_set": "closed-set (group attributes)"}


def _empty_groups() -> pd.DataFrame:
    return pd.DataFrame(columns=GROUP_TABLE_COLUMNS)


def _read_csv(path: str | Path | None) -> pd.DataFrame | None:
    return read_csv(path, keep_default_na=False) if path and Path(path).is_file() else None


def cross_check(evaluated: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The worst group of each protocol the candidate was evaluated under, with the reference's beside it."""
    candidate = json.loads(Path(evaluated["candidate"]).read_text())
    reference = json.loads(Path(evaluated["reference"]).read_text())
    return [{"protocol": label, "group": candidate[key]["worst_group"],
             "candidate": candidate[key]["worst_group_accuracy"], "ci_low": candidate[key]["worst_group_ci_low"],
             "ci_high": candidate[key]["worst_group_ci_high"], "n": candidate[key].get("worst_group_n"),
             "reference": (reference.get(key) or {}).get("worst_group_accuracy")}
            for key, label in PROTOCOLS.items() if candidate.get(key)]


def _candidate_tables(results: NightResults, gates: GateReport) -> dict[str, Any]:
    evaluated, reference = results["evaluated"], results["reference"]
    source = gates.config.wg_source

    def groups(role: str) -> pd.DataFrame:
        return read_csv(Path(evaluated[role]).parent / f"groups_{source}.csv", keep_default_na=False)

    return {
        "candidate_groups": groups("candidate"),
        "reference_groups": groups("reference"),
        "biased_tags": read_csv(Path(reference["dir"]) / "biased_tags.csv", keep_default_na=False),
        "logit_summary": read_csv(evaluated["logit_summary"], dtype={"bias_strength": str}),
        "shortcut_status": _read_csv(evaluated.get("shortcut_status")),
        "cross_check": cross_check(evaluated),
    }


def _notes(results: NightResults, trained: bool, skip_promotion: bool, states: Mapping[str, str]) -> list[str]:
    if not trained:
        return []
    stopped = next((step for step in CANDIDATE_STEPS if results.get(step) is None), None)
    skipped = (results.get("dataset") or {}).get("same_as_production") or any(s == "failed" for s in states.values())
    notes = [f"the run stopped at '{stopped}' (a task failed, see its log): no candidate tonight"] \
        if stopped and not skipped else []
    if (start := (results.get("reference") or {}).get("start")) and start["reason"] != warm.WARM_OFF:
        notes.append(warm.describe(start))
    notes += [n for n in (results.get("evaluated") or {}).get("notes", [])
              if n != (results.get("evaluated") or {}).get("production_problem")]
    promoted = results.get("promoted")
    if promoted and not promoted["promoted"] and "corrupt" not in promoted["reason"]:
        notes.append(promoted["reason"])
    if problem := serving_problem(promoted):
        notes.append(problem)
    if results.get("published") and promoted is None and skip_promotion:
        notes.append("promotion skipped on request (skip_promotion); the version is published")
    return notes


def pointer_problems(results: NightResults, production_problem: str | None) -> list[str]:
    """Every corrupt-pointer message the night met (evaluate, promote, the report's own read), once each."""
    found = [(results.get("evaluated") or {}).get("production_problem"), production_problem]
    promoted = results.get("promoted")
    if promoted and not promoted["promoted"] and "corrupt" in promoted["reason"]:
        found.append(promoted["reason"].removeprefix("not promoted: "))
    return list(dict.fromkeys(p for p in found if p))


def _history_entry(results: NightResults, context: ReportContext) -> HistoryEntry:
    return history_entry(
        night=results["sensed"]["date"], run_id=context.run_id, version=context.version,
        evaluation=json.loads(Path(results["evaluated"]["candidate"]).read_text()),
        wg_source=context.gates.config.wg_source, biased_tags=context.biased_tags, promoted=context.promoted,
        audit_rule=rule_version(results["reference"]["dir"]),
    )


def _split(dataset: Mapping[str, Any], split: str) -> tuple[pd.DataFrame, pd.Series, Path]:
    """The night's dataset rows of ``split`` (sample_id, uri, label) that trained or were evaluated (the quarantined
    held back), their tags and the dataset's folder."""
    folder = Path(dataset["dir"]) / "dataset"
    manifest = pd.read_parquet(folder / "manifest.parquet", columns=["sample_id", "uri", "label", "split"])
    held_back = _read_csv(folder / "quarantine.csv")
    kept = ~manifest["sample_id"].astype(str).isin([] if held_back is None else held_back["sample_id"].astype(str))
    rows = manifest[(manifest["split"] == split) & kept].reset_index(drop=True)
    return rows, tag_lists(pd.read_parquet(folder / "tags.parquet"), rows["sample_id"]), folder


def _trust(cfg: NightlyConfig, results: NightResults) -> list[str]:
    """How far tonight's tags and relevance decisions can be trusted (:func:`trust_lines`), once a reference ran."""
    dataset, reference = results.get("dataset"), results.get("reference")
    if not dataset or not reference:
        return []
    train, tags, folder = _split(dataset, "train")
    irrelevant = irrelevant_tags(train["label"], tags, pd.read_parquet(folder / "relevance.parquet"),
                                 keep_class_names=cfg.training.mavias.keep_class_name_tags)
    tagger = cfg.discovery.tagger
    tags_from = "the partitions' own tags" if tagger == "manifest" else f"the {tagger} tagger"
    judged_by, judge_quality = describe_judge(cfg.judge_settings())
    return trust_lines(tags_from=tags_from, tags_quality=None, judged_by=judged_by, judge_quality=judge_quality,
                       train_irrelevant=irrelevant, evidence=_read_csv(Path(reference["dir"]) / "shortcut_evidence.csv"),
                       min_support=MIN_SUPPORT)


def validation_examples(results: NightResults, biased: pd.DataFrame) -> dict[str, dict[str, Example]]:
    """Validation images behind each shortcut (:func:`shortcut_examples`), once a reference found some."""
    dataset = results.get("dataset")
    if not dataset or biased.empty:
        return {}
    val, tags, folder = _split(dataset, "val")
    return shortcut_examples(biased, val["label"].tolist(), tags.tolist(),
                             [resolve_uri(folder, uri) for uri in val["uri"]])


def decision_sources(relevance: pd.DataFrame | None, tonight: Mapping[str, Mapping[str, int]]) -> pd.DataFrame:
    """Per class, who made the decisions the night trained on (the LLM, the offline judge, a human review, the rule
    that a class's own name is relevant: the relevance table's ``source``) and where tonight's discovery took its
    decisions from (:data:`~mavias.core.judging.guarded.DecisionSource`)."""
    rows: dict[str, dict[str, int]] = {}
    if relevance is not None:
        kind = relevance["source"].map(_decider)
        for (name, who), n in relevance.groupby(["class", kind]).size().items():
            rows.setdefault(str(name), {})[who] = int(n)
    for name, counts in tonight.items():
        rows.setdefault(name, {}).update({f"tonight_{source}": n for source, n in counts.items()})
    table = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=DECISION_SOURCE_COLUMNS).fillna(0)
    return table.astype(int).rename_axis("class").reset_index().sort_values("class", ignore_index=True)


def _decider(source: str) -> str:
    """The column of :data:`DECISION_SOURCE_COLUMNS` a relevance row's ``source`` counts in."""
    by_rule = {REVIEW_SOURCE: "review", CLASS_NAME_SOURCE: "own_name"}
    return by_rule.get(source) or ("offline" if str(source).startswith(OFFLINE_SOURCE) else "llm")


def _decisions(results: NightResults) -> pd.DataFrame | None:
    dataset, discovered = results.get("dataset"), results.get("discovered") or {}
    path = Path(dataset["dir"]) / "dataset" / "relevance.parquet" if dataset else None
    relevance = pd.read_parquet(path) if path and path.is_file() else None
    if relevance is None and not discovered.get("decisions"):
        return None
    return decision_sources(relevance, discovered.get("decisions") or {})


def _judge_note(cfg: NightlyConfig, results: NightResults) -> list[str]:
    discovered = results.get("discovered") or {}
    if not discovered.get("judge_failure"):
        return []
    stood_in = sum(counts.get("fallback", 0) for counts in discovered["decisions"].values())
    return [f"The LLM judge failed tonight ({discovered['judge_failure']}): the offline judge decided {stood_in} new "
            f"(class, tag) pair(s) in its place. The LLM is asked about them again on the next night it answers; "
            f"check connection {cfg.airflow.llm_conn_id!r} and discovery.llm_requests_per_night."]


def _partition_notes(validated: Mapping[str, Any]) -> list[str]:
    """Partitions left out tonight: still uploading, or changed in the bucket after they were validated."""
    waiting = [f"partition {name} is still uploading, not validated tonight: {why.removeprefix('waiting: ')}"
               for name, why in (validated.get("waiting") or {}).items()]
    return waiting + list((validated.get("changed") or {}).values())


def _relevance_changes(results: NightResults) -> RelevanceChanges | None:
    """Tonight's relevance changes, when the dataset step recorded them."""
    path = (results.get("dataset") or {}).get("relevance_changes")
    return RelevanceChanges.model_validate_json(Path(path).read_text()) if path else None


def _gate_config(cfg: NightlyConfig) -> GateConfig:
    """The night's gate config, or the shipped one where it cannot be read: the report of a night whose gates file
    is broken still goes out (the failed quality_gates task says what is wrong with it)."""
    try:
        return load_gate_config(cfg.gates)
    except UserError:
        return load_gate_config(DEFAULT_GATES_PATH)


def build_report_context(
    cfg: NightlyConfig,
    results: NightResults,
    *,
    trained: bool,
    decision: str,
    skip_promotion: bool,
    production_version: str | None,
    notes: Iterable[str] = (),
    states: Mapping[str, str] | None = None,
    production_problem: str | None = None,
) -> tuple[ReportContext, HistoryEntry | None]:
    """The report of whatever steps completed (``results``: step name -> its result, absent when it did not run;
    ``states``: task id -> its final state, to name the tasks that failed)."""
    states = states or {}
    night = results["sensed"]["night"]
    validated = results.get("validated") or {}
    validations = {p: json.loads(Path(v["path"]).read_text()) for p, v in validated.get("validations", {}).items()}
    has_candidate = results.get("gates") is not None and results.get("packaged") is not None
    gates = GateReport.from_dict(results["gates"]) if has_candidate else GateReport(_gate_config(cfg), [])
    tables = _candidate_tables(results, gates) if has_candidate else {
        "candidate_groups": _empty_groups(), "reference_groups": _empty_groups(),
        "biased_tags": pd.DataFrame(columns=SHORTCUT_COLUMNS),
    }
    failures = read_failures(cfg, night, failed_tasks(states))
    problem = night_problem(cfg.model_name, results, trained=trained, decision=decision, states=states,
                            failures=failures, pointer_problems=pointer_problems(results, production_problem))
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
        notes=[*_notes(results, trained, skip_promotion, states), *_judge_note(cfg, results),
               *_partition_notes(validated), *notes],
        problem=problem,
        unsafe_folders=(results.get("sensed") or {}).get("unsafe", []),
        gates=gates,
        validations=validations,
        discovery=DiscoveryCounts(images_tagged=discovered["images_tagged"], llm_requests=discovered["llm_requests"],
                                  encodings=discovered["prompts_encoded"]) if discovered else None,
        verification=VerificationResult.from_dict(packaged["verification"]) if packaged else None,
        onnx_sha256=packaged.get("onnx_sha256"),
        latency=packaged.get("latency"),
        tuning=(results.get("candidate") or {}).get("tuning"),
        relevance_changes=_relevance_changes(results),
        trust=_trust(cfg, results),
        shortcut_examples=validation_examples(results, tables["biased_tags"]),
        decision_sources=_decisions(results),
        candidate_method=method_name(cfg.training.model_copy(update={"method": "mavias"})),
        **tables,
    )
    return context, _history_entry(results, context) if has_candidate else None
