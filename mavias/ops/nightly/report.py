"""Report: render the night's HTML report from whatever stages completed, as a new attempt, and queue its email
(``report``); ``notify`` sends what the outbox holds (tonight's email and any an earlier night could not send).

Each report attempt of a night is kept (``nights/<night>/report/attempt-<n>/``, uploaded to
``models/<name>/reports/<night>/attempt-<n>/``), never overwritten. The bucket being unreachable or SMTP failing
loses nothing: the report is made from local state and uploaded by a later report, the email stays in the outbox.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from mavias.ops.nightly.artifacts import NightResults, Notified, Reported
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.failures import unreported_nights
from mavias.ops.nightly.layout import REPORTS_DIR, layout, registry, reports_prefix, s3_client
from mavias.ops.nightly.report_context import build_report_context
from mavias.ops.registry import CorruptPointer
from mavias.ops.reporting.history import HistoryEntry, append_history, history_from_document, load_history
from mavias.ops.reporting.mail import Delivery, SmtpSettings, email_message
from mavias.ops.reporting.render import render_email, write_report
from mavias.storage.s3 import (
    S3Settings,
    StorageDeadline,
    get_json,
    is_condition_failure,
    is_transient,
    list_folders,
    put_json,
    s3_uri,
    upload_file,
)
from mavias.utils.atomic import write_json

log = logging.getLogger(__name__)

ATTEMPT_PREFIX = "attempt-"
OUTCOME_NAME = "outcome.json"
UPLOADED_SUFFIX = ".uploaded"


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
    why = str(err) if isinstance(err, StorageDeadline) else f"the bucket was unreachable ({type(err).__name__})"
    return f"{what}: {why}; this report was made from local state and is uploaded by a later report"


def _production_version(cfg: NightlyConfig, client: BaseClient, notes: list[str]) -> tuple[str | None, str | None]:
    """(production's version, the corrupt pointer's message)."""
    try:
        production = registry(cfg, client).production()
    except CorruptPointer as err:
        return None, str(err)
    except Exception as err:  # noqa: BLE001 - _unreachable re-raises what is not transient
        notes.append(_unreachable(err, "production model unknown"))
        return None, None
    return (production.version if production else None), None


def _attempt_number(name: str) -> int | None:
    number = name.removeprefix(ATTEMPT_PREFIX)
    return int(number) if name.startswith(ATTEMPT_PREFIX) and number.isdigit() else None


def _next_attempt(cfg: NightlyConfig, client: BaseClient, night: str, notes: list[str]) -> int:
    """One more than any attempt of the night in the workspace or (when reachable) in the bucket."""
    local = [_attempt_number(p.name) for p in layout(cfg).night_reports(night).glob(f"{ATTEMPT_PREFIX}*")]
    try:
        remote = [_attempt_number(name) for name in list_folders(client, cfg.s3, f"{reports_prefix(cfg)}{night}/")]
    except Exception as err:  # noqa: BLE001 - _unreachable re-raises what is not transient
        notes.append(_unreachable(err, "earlier reports of this night not checked"))
        remote = []
    return 1 + max((n for n in [*local, *remote] if n is not None), default=0)


def _attempts_of_run(cfg: NightlyConfig, night: str, run: str | None) -> list[str]:
    """The outbox names of the night's earlier report attempts made by the same run (a retried report task): their
    emails, if still queued, are replaced by this one's. A rerun of the night is another run: both go out."""
    if run is None:
        return []
    outcomes = layout(cfg).night_reports(night).glob(f"{ATTEMPT_PREFIX}*/{OUTCOME_NAME}")
    return [f"{night}-{path.parent.name}" for path in outcomes if json.loads(path.read_text()).get("run") == run]


def _original_outcome(cfg: NightlyConfig, night: str) -> str | None:
    first = layout(cfg).night_reports(night) / f"{ATTEMPT_PREFIX}1" / OUTCOME_NAME
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
    for folder in sorted(layout(cfg).nights.glob(f"*/{REPORTS_DIR}/{ATTEMPT_PREFIX}*")):
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
        why = f"no SMTP settings: the Airflow connection {cfg.airflow.smtp_conn_id!r} is missing or could not be read"
        return Delivery(failed=dict.fromkeys(outbox.pending(), why))
    return outbox.deliver(smtp)


class NotificationFailed(RuntimeError):
    """Notification emails stayed queued after the SMTP retries; they are sent by a later try or night."""


def notify(cfg: NightlyConfig, smtp: SmtpSettings | None) -> Notified:
    """Send the queued notifications; :class:`NotificationFailed` when any is still queued (nothing is lost). One
    the SMTP server refuses for good becomes a dead letter, named once in the next report, and blocks nothing."""
    delivery = deliver_notifications(cfg, smtp)
    if delivery.refused_session:
        raise NotificationFailed(
            f"the SMTP server refuses the session ({delivery.refused_session}): fix the SMTP connection "
            f"({cfg.airflow.smtp_conn_id}: login, password, security, from address); the {len(delivery.failed)} "
            f"notification(s) stay in {layout(cfg).outbox.folder} for the next try or night"
        )
    if delivery.failed:
        raise NotificationFailed(
            f"{len(delivery.failed)} notification(s) not sent, kept in {layout(cfg).outbox.folder} for the next try "
            f"or night: {delivery.failed}"
        )
    return {"sent": delivery.sent, "dead_letters": sorted(delivery.dead)}


def _dead_letter_notes(cfg: NightlyConfig, dead: Mapping[str, str]) -> list[str]:
    outbox = layout(cfg).outbox
    if not dead:
        return []
    reasons = "; ".join(f"{name}: {reason}" for name, reason in dead.items())
    return [f"{len(dead)} notification email(s) could not be delivered and were moved to {outbox.dead_folder} "
            f"({reasons}). Check report.recipients and the SMTP connection; to send one again, move its .eml back "
            f"into {outbox.folder} (it keeps the addresses it was queued with: correct its To: line first where a "
            "recipient was refused)."]


def _unreported_notes(cfg: NightlyConfig, night: str) -> list[str]:
    if not (nights := unreported_nights(cfg, night)):
        return []
    return [f"The night(s) {', '.join(nights)} started but sent no report: their run was stopped before the report "
            f"task (the run's time limit, airflow.dagrun_timeout_h = {cfg.airflow.dagrun_timeout_h:g} h, or a run "
            "marked failed by hand). Their runs in Airflow show the tasks that were still running."]


def report(
    cfg: NightlyConfig,
    results: NightResults,
    *,
    trained: bool,
    decision: str,
    skip_promotion: bool = False,
    smtp: SmtpSettings | None = None,
    states: Mapping[str, str] | None = None,
    run: str | None = None,
) -> Reported:
    """Render the night's HTML report from whatever steps completed as a new attempt
    (``nights/<night>/report/attempt-<n>/``, uploaded to ``models/<name>/reports/<night>/attempt-<n>/``) and queue its
    email (``notify`` sends it, in place of one the same ``run`` queued before and notify did not send yet: a
    retried report task; ``smtp`` gives its sender address). The bucket being unreachable or stalled
    (``report.storage_deadline_s``) loses nothing: the report is made from local state and uploaded later.
    ``failure`` is set when the night failed (``finish`` then fails the run)."""
    client = s3_client(cfg, "report", cfg.report.storage_deadline_s)
    night = results["sensed"]["night"]
    dead = layout(cfg).outbox.unreported_dead()  # marked as named once this report is written and queued
    notes: list[str] = _dead_letter_notes(cfg, dead) + _unreported_notes(cfg, night)
    attempt = _next_attempt(cfg, client, night, notes)
    production, pointer_problem = _production_version(cfg, client, notes)
    context, entry = build_report_context(cfg, results, trained=trained, decision=decision,
                                          skip_promotion=skip_promotion, production_version=production, notes=notes,
                                          states=states, production_problem=pointer_problem)
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
    folder = layout(cfg).night_reports(night) / f"{ATTEMPT_PREFIX}{attempt}"
    html = write_report(folder, context)
    email = render_email(context)
    earlier = _attempts_of_run(cfg, night, run)
    write_json(folder / OUTCOME_NAME, {"subject": email.subject, "promoted": context.promoted,
                                       "version": context.version, "run": run})
    try:
        uploaded = bool(upload_pending_reports(cfg, client))
    except Exception as err:  # noqa: BLE001 - _unreachable re-raises what is not transient
        _unreachable(err, "report not uploaded")
        uploaded = False
    name = f"{night}-{ATTEMPT_PREFIX}{attempt}"
    queued = None
    if cfg.report.recipients:  # also without SMTP settings (a connection unreadable now): notify adds the sender
        layout(cfg).outbox.put(name, email_message(email, cfg.report.recipients, smtp and smtp.from_addr))
        layout(cfg).outbox.withdraw(earlier, f"{name}, the same run's report made again, replaces it")
        queued = name
    layout(cfg).outbox.mark_reported(list(dead))
    status = ("promoted" if context.promoted else "not promoted") + (
        "" if context.serving_updated else ", serving not updated")
    key = f"{reports_prefix(cfg)}{night}/{folder.name}/{html.name}"
    problem = context.problem
    return {"html": str(html), "uri": s3_uri(cfg.s3, key), "uploaded": uploaded, "attempt": attempt,
            "queued": queued, "recipients": list(cfg.report.recipients) if queued else [], "status": status,
            "promoted": context.promoted, "version": context.version,
            "failure": problem.title if problem is not None and problem.severity == "failed" else None}
