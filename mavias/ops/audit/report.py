"""The audit's outputs: the nightly report's HTML page for this one run (:mod:`mavias.ops.reporting`), ``biased_tags.csv``
and the caveats every output carries: tags that are noise, an empty B' and why, figures from too few samples."""

from __future__ import annotations

import json
import logging
from datetime import UTC, date, datetime
from pathlib import Path

import pandas as pd

from mavias.core.evaluate.explain import small_group_caveats, trust_lines
from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.judging.factory import describe_judge
from mavias.core.judging.review import REVIEW_SOURCE
from mavias.core.manifest import load_manifest
from mavias.core.protocol.reference_files import rule_version
from mavias.core.relevance import load_relevance
from mavias.core.tagging.base import RANDOM_WEIGHTS_WARNING
from mavias.core.train.checkpoints import load_main_model
from mavias.core.train.config import method_name
from mavias.core.train.inference import predict
from mavias.ops.audit.options import PARTITION
from mavias.ops.audit.steps import Audit, biased_tags_reason, prepare
from mavias.ops.export.verification import VerificationResult
from mavias.ops.reporting.context import DiscoveryCounts, ReportContext
from mavias.ops.reporting.examples import Example, shortcut_examples
from mavias.ops.reporting.history import history_entry
from mavias.ops.reporting.plots import bias_alignment, logit_summary
from mavias.ops.reporting.render import write_report
from mavias.utils.csvfile import write_csv

log = logging.getLogger(__name__)

NOISE_CAVEAT = "tags from random weights: noise"


def caveats(audit: Audit) -> list[str]:
    """What every output says before any number: noisy tags, an empty B' and why, too few samples, the warnings."""
    notes = [RANDOM_WEIGHTS_WARNING] if audit.tags_are_noise else []
    reason = biased_tags_reason(audit)
    if reason:
        notes.append(f"No biased tags found (B' is empty): {reason}. The open-set groups are then whole classes, so "
                     "the worst-group accuracy cannot show a shortcut.")
    for protocol in ("open_set", "closed_set"):
        if protocol in audit.evaluations["mavias"]:
            name = protocol.replace("_", "-")
            candidate, reference = (audit.evaluations[role][protocol] for role in ("mavias", "reference"))
            notes += small_group_caveats(candidate, f"MAVias {name}")
            if reference["worst_group"] != candidate["worst_group"]:  # the same groups: only its worst one differs
                notes += small_group_caveats(reference, f"ERM reference {name}", groups=False)
    training = [w for run in (audit.reference.run, audit.candidate) if run is not None for w in run.warnings]
    return list(dict.fromkeys(notes + audit.warnings() + training))


def _logit_summaries(audit: Audit) -> pd.DataFrame:
    """The paper's logit plot input: mean training-sample logits of bias-aligned and bias-conflicting samples."""
    train = prepare(audit)["train"]
    rows = []
    for model, checkpoint in (("ERM reference", audit.reference.checkpoint), ("MAVias", audit.candidate.checkpoint(
            audit.config.selection))):
        pred = predict(load_main_model(checkpoint)[0], train)
        strength = bias_alignment(pred["label_name"], pred["irrelevant_tags"], audit.reference.biased_tags)
        rows.append(logit_summary(pred, strength, model=model))
    return pd.concat(rows, ignore_index=True)


def _benchmark_discovery(audit: Audit) -> dict:
    """What a built-in benchmark's folder says of its tags and relevance (``benchmark.json``), if the audited data is
    one."""
    folder = audit.options.path if audit.options.path.is_dir() else audit.options.path.parent
    info = folder / "benchmark.json"
    try:
        discovery = json.loads(info.read_text()).get("discovery", {}) if info.is_file() else {}
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        discovery = None
    if not isinstance(discovery, dict):  # a file of the user's own by that name: it claims nothing
        log.warning("%s is not a built-in benchmark's description: the tags' and the judge's quality are not known", info)
        return {}
    return discovery


def trust(audit: Audit) -> list[str]:
    """How far the tags and relevance decisions behind B' can be trusted (:func:`trust_lines`)."""
    has_tags = "tags" in load_manifest(audit.paths.manifest, check_files=False).columns
    tagger = audit.options.tagger
    tags_from = "the data's own tags" if has_tags else f"OpenCLIP {tagger.model}/{tagger.pretrained}"
    judged_by, judge_quality = describe_judge(audit.options.judge)
    relevance = load_relevance(audit.workspace.relevance(PARTITION))
    if reviewed := int((relevance["source"] == REVIEW_SOURCE).sum()):
        judged_by += f", {reviewed} decision(s) of them overridden by the review {audit.options.review}"
    tags_quality, tag_precision, measured_judge = benchmark_quality(
        _benchmark_discovery(audit), tags_replaced=audit.options.tags is not None,
        offline_judge=audit.options.judge.kind == "offline", reviewed=reviewed > 0)
    train = prepare(audit)["train"].frame
    return trust_lines(tags_from=tags_from, tags_quality=tags_quality, judged_by=judged_by,
                       judge_quality=measured_judge or judge_quality, train_irrelevant=train["irrelevant_tags"],
                       evidence=audit.reference.evidence, min_support=audit.options.min_support,
                       tag_precision=tag_precision)


def benchmark_quality(known: dict, *, tags_replaced: bool, offline_judge: bool,
                      reviewed: bool) -> tuple[str | None, dict[str, float], str | None]:
    """What a built-in benchmark's folder measured (``benchmark.json``'s ``discovery``) of the tags and the decisions
    the audit used: its tagger's mean F1 and per-word precision unless ``--tags`` replaced its tags; its offline
    judge's precision and recall when the audit judged offline too, nothing leaked and no review overrode any."""
    tags, relevance = known.get("tags", {}), known.get("relevance", {})
    tags_quality, tag_precision, judge_quality = None, {}, None
    if not tags_replaced and tags.get("source") == "tagger" and "mean_f1" in tags:
        tags_quality = f"measured mean per-tag F1 {tags['mean_f1']:.2f} on held-out images"
        tag_precision = measured_precision(tags.get("per_tag", []))
    if offline_judge and not reviewed and relevance.get("source") == "judge" and not relevance.get("leak") \
            and "precision" in relevance:
        judge_quality = (f"measured precision {relevance['precision']:.0%} / recall {relevance['recall']:.0%} on "
                         "these classes")
    return tags_quality, tag_precision, judge_quality


def measured_precision(per_tag: list[dict]) -> dict[str, float]:
    """Each word's measured precision (``benchmark.json``'s ``per_tag``), where the tagger gave it to at least
    ``MIN_SUPPORT`` held-out images (hits / precision; a word never given right has no count and no claim)."""
    return {row["tag"]: row["precision"] for row in per_tag
            if row["precision"] and row["support"] * row["recall"] / row["precision"] >= MIN_SUPPORT}


def examples(audit: Audit) -> dict[str, dict[str, Example]]:
    """Validation images behind each shortcut (:func:`shortcut_examples`)."""
    val = prepare(audit).splits.get("val")
    if val is None or not val.is_image or audit.reference.biased_tags.empty:
        return {}
    return shortcut_examples(audit.reference.biased_tags, val.frame["label"].tolist(),
                             val.frame["sample_tags"].tolist(), val.inputs.paths)


def report_context(audit: Audit, name: str, version: str, notes: list[str], trusted: list[str]) -> ReportContext:
    source = audit.gates.config.wg_source
    metrics = {role: json.loads((audit.paths.evaluation(role) / "metrics.json").read_text()) for role in
               ("mavias", "reference")}
    entry = history_entry(night=date.today(), run_id=version, version=version, evaluation=metrics["mavias"],
                          wg_source=source, biased_tags=audit.reference.biased_tags, promoted=False,
                          audit_rule=rule_version(audit.paths.reference))
    counts = audit.counts
    return ReportContext(
        model_name=name, version=version, run_id=version, created=datetime.now(UTC), promoted=False,
        production_version=None, model_uri=str(audit.paths.model), notes=notes, gates=audit.gates,
        validations={"data": json.loads(audit.paths.validation.read_text())},
        candidate_groups=audit.evaluations["mavias"]["tables"][source],
        reference_groups=audit.evaluations["reference"]["tables"][source],
        biased_tags=audit.reference.biased_tags, logit_summary=_logit_summaries(audit), history=[entry],
        discovery=DiscoveryCounts(images_tagged=counts.images_tagged, llm_requests=counts.llm_requests,
                                  encodings=counts.prompts_encoded),
        verification=VerificationResult.from_dict(audit.card["verification"]), onnx_sha256=audit.card["onnx"]["sha256"],
        min_support=audit.options.min_support, trust=trusted, shortcut_examples=examples(audit),
        candidate_method=method_name(audit.config.model_copy(update={"method": "mavias"})), audit=True,
        evaluation_split=metrics["mavias"]["split"])


def write_outputs(audit: Audit, name: str, version: str) -> Path:
    """``report.html`` (with its plots), ``biased_tags.csv`` (a ``caveat`` column when the tags are noise) and the
    summary in ``audit.json`` (the caveats and the trust lines included); returns the report's path."""
    notes, trusted = caveats(audit), trust(audit)
    html = write_report(audit.paths.root, report_context(audit, name, version, notes, trusted))
    biased = audit.reference.biased_tags
    if audit.tags_are_noise:
        biased = biased.assign(caveat=NOISE_CAVEAT)
    write_csv(biased, audit.paths.biased_tags)
    audit.state.record(report=str(html), model=str(audit.paths.model), biased_tags=str(audit.paths.biased_tags),
                       min_support=audit.options.min_support, caveats=notes, trust=trusted,
                       gates_passed=audit.gates.passed)
    return html
