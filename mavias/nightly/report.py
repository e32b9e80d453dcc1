"""Report: render the night's HTML report from whatever stages completed, as a new attempt, queue its email and
send the outbox (``report``); ``notify`` sends what is still queued.

Each report attempt of a night is kept (``nights/<night>/report/attempt-<n>/``, uploaded to
``models/<name>/reports/<night>/attempt-<n>/``), never overwritten. The bucket being unreachable or SMTP failing
loses nothing: the report is made from local state and uploaded by a later report, the email stays in the outbox.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from mavias.evaluate.metrics import GROUP_TABLE_COLUMNS
from mavias.evaluate.shortcuts import SHORTCUT_COLUMNS
from mavias.export.parity import VerificationResult
from mavias.gates import GateReport, load_gate_config
from mavias.nightly.artifacts import NightResults, Notified, Reported
from mavias.nightly.config import NightlyConfig
from mavias.nightly.layout import layout, registry, reports_prefix
from mavias.nightly.release import serving_problem
from mavias.registry import CorruptPointer
from mavias.registry.storage import (
    S3Settings,
    get_json,
    is_condition_failure,
    is_transient,
    list_folders,
    make_s3_client,
    put_json,
    s3_uri,
    upload_file,
)
from mavias.reporting.context import DiscoveryCounts, RelevanceChanges, ReportContext
from mavias.reporting.history import HistoryEntry, append_history, history_entry, history_from_document, load_history
from mavias.reporting.mail import Delivery, SmtpSettings, email_message
from mavias.reporting.render import render_email, write_report
from mavias.utils.atomic import write_json

log = logging.getLogger(__name__)

CANDIDATE_STEPS = ("planned", "discovered", "dataset", "reference", "candidate", "evaluated", "gates", "packaged")
ATTEMPT_PREFIX = "attempt-"
OUTCOME_NAME = "outcome.json"
UPLOADED_SUFFIX = ".uploaded"


def _empty_groups() -> pd.DataFrame:
    return pd.DataFrame(columns=GROUP_TABLE_COLUMNS)


def _candidate_tables(results: NightResults, gates: GateReport) -> dict[str, Any]:
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


def _notes(results: NightResults, trained: bool, decision: str, skip_promotion: bool) -> list[str]:
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


def _history_entry(results: NightResults, context: ReportContext) -> HistoryEntry:
    return history_entry(
        night=results["sensed"]["date"], run_id=context.run_id, version=context.version,
        evaluation=json.loads(Path(results["evaluated"]["candidate"]).read_text()),
        wg_source=context.gates.config.wg_source, biased_tags=context.biased_tags, promoted=context.promoted,
    )


def _synced_history(cfg: NightlyConfig, client: BaseClient, entry: HistoryEntry | None) -> list[HistoryEntry]:
    """The bucket's history merged into the workspace's (a night recorded while the bucket was unreachable is
    kept) plus tonight's entry, saved in the workspace and the bucket."""
    key = f"{reports_prefix(cfg)}history.json"
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


def _relevance_changes(results: NightResults) -> RelevanceChanges | None:
    """Tonight's relevance changes, when the dataset step recorded them."""
    path = (results.get("dataset") or {}).get("relevance_changes")
    return RelevanceChanges.model_validate_json(Path(path).read_text()) if path else None


def build_report_context(
    cfg: NightlyConfig,
    results: NightResults,
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
        "biased_tags": pd.DataFrame(columns=SHORTCUT_COLUMNS),
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


def _attempt_number(name: str) -> int | None:
    number = name.removeprefix(ATTEMPT_PREFIX)
    return int(number) if name.startswith(ATTEMPT_PREFIX) and number.isdigit() else None


def _next_attempt(cfg: NightlyConfig, client: BaseClient, night: str, notes: list[str]) -> int:
    """One more than any attempt of the night in the workspace or (when reachable) in the bucket."""
    local = [_attempt_number(p.name) for p in (layout(cfg).night(night) / "report").glob(f"{ATTEMPT_PREFIX}*")]
    try:
        remote = [_attempt_number(name) for name in list_folders(client, cfg.s3, f"{reports_prefix(cfg)}{night}/")]
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
        prefix = f"{reports_prefix(cfg)}{folder.parent.parent.name}/{folder.name}/"
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


def notify(cfg: NightlyConfig, smtp: SmtpSettings | None) -> Notified:
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
    results: NightResults,
    *,
    trained: bool,
    decision: str,
    skip_promotion: bool = False,
    smtp: SmtpSettings | None = None,
) -> Reported:
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
    key = f"{reports_prefix(cfg)}{night}/{folder.name}/{html.name}"
    return {"html": str(html), "uri": s3_uri(cfg.s3, key), "uploaded": uploaded, "attempt": attempt,
            "emailed_to": list(cfg.report.recipients) if notified else [], "status": status,
            "promoted": context.promoted, "version": context.version}
