"""Send the HTML report by email (stdlib smtplib), retrying transient SMTP failures.

The message is ``multipart/alternative``: a plain-text summary, then ``multipart/related`` with the HTML and its
images (plots, the shortcuts' example strips) as inline PNG parts whose Content-IDs the HTML references as
``cid:...``. The Airflow layer maps its SMTP connection to :class:`SmtpSettings`; the password is a SecretStr and is
never logged (never enable smtplib's debug output: it prints the AUTH exchange).
"""

from __future__ import annotations

import logging
import re
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import formatdate, getaddresses, make_msgid, parseaddr
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, wait_exponential

from mavias.utils.atomic import write_bytes

log = logging.getLogger(__name__)

CID_REFERENCE = re.compile(r"""cid:([^"'\s)>]+)""")


class SmtpSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    host: str
    port: int = Field(587, ge=1, le=65535)
    user: str | None = None
    password: SecretStr | None = None
    security: Literal["none", "starttls", "ssl"] = "starttls"
    from_addr: str
    timeout: float = Field(30.0, gt=0)
    max_attempts: int = Field(5, ge=1)
    retry_wait_s: float = Field(2.0, ge=0, description="first wait between attempts; doubles up to 60 s")

    @model_validator(mode="after")
    def _credentials_together(self) -> SmtpSettings:
        if (self.user is None) != (self.password is None):
            raise ValueError("set both user and password, or neither")
        return self


def is_transient(error: BaseException) -> bool:
    """4xx replies, refused or dropped connections and timeouts are worth retrying; 5xx replies are not."""
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        return all(400 <= code < 500 for code, _ in error.recipients.values())
    if isinstance(error, smtplib.SMTPResponseException):
        return 400 <= error.smtp_code < 500
    return isinstance(error, (smtplib.SMTPServerDisconnected, ConnectionError, TimeoutError))


def build_message(
    html: str, images: Mapping[str, bytes], subject: str, recipients: Sequence[str], from_addr: str | None, text: str
) -> EmailMessage:
    """The email; every ``cid:`` the HTML references must be in ``images`` (content id without angle brackets)."""
    if not recipients:
        raise ValueError("no recipients")
    missing = set(CID_REFERENCE.findall(html)) - set(images)
    if missing:
        raise ValueError(f"the HTML references images that are not attached: {sorted(missing)}")
    message = EmailMessage()
    message["Subject"] = subject
    if from_addr is not None:  # else the delivery adds its SMTP settings' sender
        message["From"] = from_addr
    message["To"] = ", ".join(recipients)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain=parseaddr(from_addr or "")[1].rpartition("@")[2] or None)
    message.set_content(text)
    message.add_alternative(html, subtype="html")
    html_part = message.get_payload()[1]
    for cid, png in images.items():
        name = cid.split("@")[0]
        html_part.add_related(
            png, maintype="image", subtype="png", cid=f"<{cid}>", disposition="inline", filename=f"{name}.png"
        )
    return message


Refused = dict[str, tuple[int, bytes]]  # recipient -> (SMTP code, reply) of those refused while others accepted


def _deliver(message: EmailMessage, recipients: Sequence[str], smtp: SmtpSettings) -> Refused:
    context = ssl.create_default_context()
    client = (
        smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=smtp.timeout, context=context)
        if smtp.security == "ssl"
        else smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout)
    )
    with client:
        if smtp.security == "starttls":
            client.starttls(context=context)
        if smtp.user is not None and smtp.password is not None:
            client.login(smtp.user, smtp.password.get_secret_value())
        refused = client.send_message(message, to_addrs=list(recipients))
    if refused:
        log.warning("report email: %d recipient(s) refused: %s", len(refused), sorted(refused))
    return refused


def send_message(message: EmailMessage, recipients: Sequence[str], smtp: SmtpSettings) -> Refused:
    """Deliver a built message, retrying transient failures with exponential backoff; the recipients the server
    refused while it accepted the message for the others."""
    retrying = Retrying(
        stop=stop_after_attempt(smtp.max_attempts),
        wait=wait_exponential(multiplier=smtp.retry_wait_s, max=60),
        retry=retry_if_exception(is_transient),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )
    refused = retrying(_deliver, message, recipients, smtp)
    log.info("email %r sent via %s:%d to %d recipient(s)", message["Subject"], smtp.host, smtp.port,
             len(recipients) - len(refused))
    return refused


def addressed_to(message: EmailMessage, recipients: Sequence[str]) -> EmailMessage:
    """A copy of ``message`` for ``recipients`` alone."""
    copy = BytesParser(policy=policy.default).parsebytes(message.as_bytes(policy=policy.SMTP))
    del copy["To"]
    copy["To"] = ", ".join(recipients)
    return copy


@dataclass(frozen=True)
class EmailContent:
    subject: str
    html: str  # references its images as cid:<content id>
    text: str
    images: dict[str, bytes]  # content id (without <>) -> PNG


def email_message(content: EmailContent, recipients: Sequence[str], from_addr: str | None) -> EmailMessage:
    return build_message(content.html, content.images, content.subject, recipients, from_addr, content.text)


@dataclass
class Delivery:
    sent: list[str] = field(default_factory=list)  # outbox names
    failed: dict[str, str] = field(default_factory=dict)  # outbox name -> why (kept for the next try)
    dead: dict[str, str] = field(default_factory=dict)  # outbox name -> why (moved to the dead letters)
    refused_session: str | None = None  # the SMTP settings' fault that stopped the delivery (every email kept)


MAX_DELIVERY_TRIES = 5  # deliveries (each with its own SMTP retries) before a message becomes a dead letter


MESSAGE_TOO_LARGE = 552  # the reply to MAIL FROM ... SIZE=n of a message over the server's limit


def refuses_message(error: BaseException) -> bool:
    """A refusal of this message no retry will change (a 5xx reply to its recipients, its size or its content, or
    an address the server cannot take)."""
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        return all(code >= 500 for code, _ in error.recipients.values())
    if isinstance(error, smtplib.SMTPNotSupportedError):
        return "SMTPUTF8" in str(error)
    if isinstance(error, smtplib.SMTPSenderRefused) and error.smtp_code == MESSAGE_TOO_LARGE:
        return True
    return isinstance(error, smtplib.SMTPDataError) and error.smtp_code >= 500


def refuses_session(error: BaseException) -> bool:
    """A refusal of the session itself, so of every message alike: the SMTP settings are wrong (login, sender,
    security, greeting), not the message."""
    if refuses_message(error):
        return False
    return isinstance(error, smtplib.SMTPNotSupportedError) or (
        isinstance(error, smtplib.SMTPResponseException) and error.smtp_code >= 500)


class Outbox:
    """Emails waiting to be sent, one ``<name>.eml`` file each: a notification that cannot be sent now is kept and
    sent by a later :meth:`deliver` (the next try or the next night). One refused for good (a 5xx reply to it) or
    that failed ``MAX_DELIVERY_TRIES`` deliveries moves to ``dead/`` with its reason, so it cannot block later nights;
    :meth:`unreported_dead` names each one for the next report, until :meth:`mark_reported` says a report did."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.dead_folder = self.folder / "dead"

    def put(self, name: str, message: EmailMessage) -> Path:
        return write_bytes(self.folder / f"{name}.eml", message.as_bytes(policy=policy.SMTP))

    def withdraw(self, names: Sequence[str], why: str) -> None:
        """Take the still-queued emails among ``names`` out of the outbox (those sent already are gone)."""
        for name in set(names) & set(self.pending()):
            self._remove(name)
            log.info("email %s withdrawn: %s", name, why)

    def pending(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.eml"))

    def deliver(self, smtp: SmtpSettings) -> Delivery:
        """Send every queued message (oldest name first); a sent one leaves the outbox, a failed one stays or, when
        refused for good or tried too often, becomes a dead letter. A session the server refuses (a wrong login,
        sender or security setting) stops the delivery and keeps every message, its tries uncounted."""
        delivery = Delivery()
        pending = self.pending()
        for index, name in enumerate(pending):
            path = self.folder / f"{name}.eml"
            message = BytesParser(policy=policy.default).parsebytes(path.read_bytes())
            if message["From"] is None:  # queued while the SMTP settings could not be read
                message["From"] = smtp.from_addr
            recipients = [address for _, address in getaddresses(message.get_all("To", []))]
            try:
                refused = send_message(message, recipients, smtp)
            except (smtplib.SMTPException, OSError) as err:
                reason = f"{type(err).__name__}: {err}"
                if refuses_session(err):  # no message is at fault: keep them all, uncounted, for fixed settings
                    delivery.failed |= dict.fromkeys(pending[index:], reason)
                    delivery.refused_session = reason
                    log.error("the SMTP server refuses the session (%s): every email stays in %s", reason, self.folder)
                    break
                if refuses_message(err) or self._count_try(name) >= MAX_DELIVERY_TRIES:
                    self._bury(name, reason)
                    delivery.dead[name] = reason
                else:
                    log.warning("email %s not sent, kept in %s: %s", name, self.folder, err)
                    delivery.failed[name] = reason
                continue
            delivery.sent.append(name)
            if refused and self._keep_for_refused(name, message, refused, delivery):
                continue
            self._remove(name)
        return delivery

    def _keep_for_refused(self, name: str, message: EmailMessage, refused: Refused, delivery: Delivery) -> bool:
        """Sent to some recipients only: a copy for those refused for good (5xx) becomes a dead letter; the message
        stays queued for those refused for now (4xx, e.g. greylisting), addressed to them alone. True if it stays."""
        reasons = {address: f"{code} {reply.decode(errors='replace')}" for address, (code, reply) in refused.items()}
        later = [address for address, (code, _) in refused.items() if 400 <= code < 500]
        if never := sorted(set(refused) - set(later)):
            copy = f"{name}-refused-{len(list(self.dead_folder.glob(f'{name}-refused-*.eml'))) + 1}"  # one per try
            self.put(copy, addressed_to(message, never))
            reason = "recipient(s) refused for good: " + "; ".join(f"{a}: {reasons[a]}" for a in never)
            self._bury(copy, reason)
            delivery.dead[copy] = reason
        if not later:
            return False
        self.put(name, addressed_to(message, later))
        reason = "recipient(s) refused for now: " + "; ".join(f"{a}: {reasons[a]}" for a in later)
        if self._count_try(name) >= MAX_DELIVERY_TRIES:
            self._bury(name, reason)
            delivery.dead[name] = reason
        else:
            delivery.failed[name] = reason
        return True

    def _remove(self, name: str) -> None:
        """Take a message and its try counter out of the outbox (the counter first: a kill between leaves the message
        queued with no tries counted, never a counter a later message of that name would inherit)."""
        (self.folder / f"{name}.tries").unlink(missing_ok=True)
        (self.folder / f"{name}.eml").unlink(missing_ok=True)

    def _count_try(self, name: str) -> int:
        counter = self.folder / f"{name}.tries"
        text = counter.read_text(errors="replace").strip() if counter.exists() else ""
        tries = (int(text) if text.isdecimal() else 0) + 1  # a counter a kill left unreadable counts from its start
        write_bytes(counter, str(tries).encode(), sync=False)
        return tries

    def _bury(self, name: str, reason: str) -> None:
        self.dead_folder.mkdir(parents=True, exist_ok=True)
        (self.dead_folder / f"{name}.reported").unlink(missing_ok=True)  # one moved back and dead again: named again
        (self.dead_folder / f"{name}.reason.txt").write_text(reason + "\n")
        (self.folder / f"{name}.eml").replace(self.dead_folder / f"{name}.eml")
        (self.folder / f"{name}.tries").unlink(missing_ok=True)
        log.error("email %s cannot be delivered (%s): moved to %s", name, reason, self.dead_folder)

    def unreported_dead(self) -> dict[str, str]:
        """Dead letters no report has named yet (name -> reason), until :meth:`mark_reported` says one did."""
        found = {}
        for reason in sorted(self.dead_folder.glob("*.reason.txt")):
            name = reason.name.removesuffix(".reason.txt")
            if not (self.dead_folder / f"{name}.reported").exists():
                found[name] = reason.read_text().strip()
        return found

    def mark_reported(self, names: Sequence[str]) -> None:
        """These dead letters are named in a report that was written (and queued): no later report names them."""
        for name in names:
            (self.dead_folder / f"{name}.reported").touch()
