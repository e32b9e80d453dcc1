"""Report email through a real SMTP server (aiosmtpd on 127.0.0.1): structure, retries, credentials."""

from __future__ import annotations

import logging
import smtplib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email import message_from_bytes, policy

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from mavias.ops.reporting.mail import (
    MAX_DELIVERY_TRIES,
    EmailContent,
    Outbox,
    SmtpSettings,
    build_message,
    email_message,
    send_message,
)
from mavias.ops.reporting.render import render_email
from mavias.utils.servers import free_port
from tests.ops.reporting.test_report import fake_context

RECIPIENTS = ["ml-team@example.org", "oncall@example.org"]
PASSWORD = "s3cret-Pa55word"


class Inbox:
    """aiosmtpd handler: answers DATA with the queued replies first, then accepts and stores the messages."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.envelopes = []
        self.calls = 0

    async def handle_DATA(self, server, session, envelope):
        self.calls += 1
        if self.replies:
            return self.replies.pop(0)
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


@contextmanager
def smtp_server(handler: Inbox, port: int | None = None, **smtp_options) -> Iterator[Controller]:
    controller = Controller(handler, hostname="127.0.0.1", port=port or free_port(), **smtp_options)
    controller.start()
    try:
        yield controller
    finally:
        controller.stop()


def settings(port: int, **changes) -> SmtpSettings:
    base = {"host": "127.0.0.1", "port": port, "security": "none", "from_addr": "MAVias nightly <mavias@example.org>",
            "timeout": 5, "retry_wait_s": 0.05}
    return SmtpSettings(**base | changes)


def send(email: EmailContent, smtp: SmtpSettings) -> None:
    """What the outbox does for each queued email: the message built, then sent with retries."""
    send_message(email_message(email, RECIPIENTS, smtp.from_addr), RECIPIENTS, smtp)


@pytest.fixture(scope="module")
def email() -> EmailContent:
    return render_email(fake_context())


def test_report_email_arrives_with_inline_images(email):
    inbox = Inbox()
    with smtp_server(inbox) as server:
        send(email, settings(server.port))
    (envelope,) = inbox.envelopes
    assert envelope.rcpt_tos == RECIPIENTS and envelope.mail_from == "mavias@example.org"
    message = message_from_bytes(envelope.content, policy=policy.default)
    assert message["Subject"] == email.subject and message["To"] == ", ".join(RECIPIENTS)
    assert message.get_content_type() == "multipart/alternative"
    assert "Quality gates" not in message.get_body(("plain",)).get_content()  # the text summary, not the HTML
    html_part = message.get_body(("html",))
    assert html_part.get_content().replace("\r\n", "\n").rstrip() == email.html.rstrip()
    images = {
        part["Content-ID"].strip("<>"): part.get_content()
        for part in message.walk() if part.get_content_type() == "image/png"
    }
    assert images == email.images and len(images) == 2
    assert all(f"cid:{cid}" in email.html for cid in images)
    assert all(part.get_content_disposition() == "inline" for part in message.walk() if part["Content-ID"])


def test_a_451_reply_is_retried(email):
    inbox = Inbox("451 4.3.0 Try again later")
    with smtp_server(inbox) as server:
        send(email, settings(server.port))
    assert inbox.calls == 2 and len(inbox.envelopes) == 1


def test_a_server_that_comes_up_late_still_gets_the_email(email):
    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    timer = threading.Timer(0.3, controller.start)  # the first attempts get "connection refused"
    timer.start()
    try:
        send(email, settings(port, max_attempts=8, retry_wait_s=0.1))
    finally:
        timer.join()
        controller.stop()
    assert len(inbox.envelopes) == 1


def test_a_permanent_failure_is_not_retried(email):
    inbox = Inbox("554 5.6.0 Message rejected")
    with smtp_server(inbox) as server, pytest.raises(smtplib.SMTPDataError):
        send(email, settings(server.port))
    assert inbox.calls == 1


def _authenticator(server, session, envelope, mechanism, auth_data: LoginPassword) -> AuthResult:
    return AuthResult(success=auth_data == LoginPassword(b"mavias", PASSWORD.encode()), handled=False)


def test_login_works_and_the_password_is_never_logged(email, caplog):
    caplog.set_level(logging.DEBUG)
    inbox = Inbox()
    with smtp_server(inbox, authenticator=_authenticator, auth_require_tls=False) as server:
        good = settings(server.port, user="mavias", password=PASSWORD)
        send(email, good)
        with pytest.raises(smtplib.SMTPAuthenticationError) as error:
            send(email, settings(server.port, user="mavias", password="wrong-" + PASSWORD))
    assert len(inbox.envelopes) == 1
    assert PASSWORD not in caplog.text and PASSWORD not in repr(good) and PASSWORD not in str(error.value)


def test_unattached_images_and_empty_recipient_lists_are_refused():
    with pytest.raises(ValueError, match="not attached"):
        build_message('<img src="cid:plot@x">', {}, "s", RECIPIENTS, "a@example.org", "text")
    with pytest.raises(ValueError, match="no recipients"):
        build_message("<p>hi</p>", {}, "s", [], "a@example.org", "text")
    with pytest.raises(ValueError, match="user and password"):
        settings(25, user="mavias")


def test_an_email_refused_for_good_becomes_a_dead_letter_and_blocks_nothing(email, tmp_path):
    outbox = Outbox(tmp_path / "outbox")
    for name in ("20250101-report", "20250102-report"):
        outbox.put(name, email_message(email, RECIPIENTS, "mavias@example.org"))
    inbox = Inbox("554 5.6.0 Message rejected")  # the first message is refused for good, the second accepted
    with smtp_server(inbox) as server:
        delivery = outbox.deliver(settings(server.port))
    assert delivery.sent == ["20250102-report"] and list(delivery.dead) == ["20250101-report"]
    assert "554" in delivery.dead["20250101-report"] and not delivery.failed and outbox.pending() == []
    assert (outbox.dead_folder / "20250101-report.eml").is_file()
    assert list(outbox.unreported_dead()) == ["20250101-report"] == list(outbox.unreported_dead())  # until named
    outbox.mark_reported(["20250101-report"])  # a report that names it was written
    assert outbox.unreported_dead() == {}  # said once
    (outbox.dead_folder / "20250101-report.eml").replace(outbox.folder / "20250101-report.eml")  # sent again ...
    with smtp_server(Inbox("554 5.6.0 Message rejected")) as server:
        assert list(outbox.deliver(settings(server.port)).dead) == ["20250101-report"]
    assert list(outbox.unreported_dead()) == ["20250101-report"]  # ... and dead again: the next report says so


def test_a_session_the_server_refuses_keeps_every_email_and_counts_no_try(email, tmp_path):
    outbox = Outbox(tmp_path / "outbox")
    for name in ("20250101-report", "20250102-report"):
        outbox.put(name, email_message(email, RECIPIENTS, "mavias@example.org"))
    inbox = Inbox()
    with smtp_server(inbox, authenticator=_authenticator, auth_require_tls=False) as server:
        wrong = settings(server.port, user="mavias", password="rotated-" + PASSWORD)
        for _ in range(MAX_DELIVERY_TRIES + 1):  # nights of a wrong password kill no email
            delivery = outbox.deliver(wrong)
            assert "SMTPAuthenticationError" in delivery.refused_session and PASSWORD not in delivery.refused_session
            assert list(delivery.failed) == ["20250101-report", "20250102-report"] and not delivery.dead
        assert outbox.pending() == ["20250101-report", "20250102-report"] and not outbox.dead_folder.exists()
        fixed = outbox.deliver(settings(server.port, user="mavias", password=PASSWORD))
    assert fixed.sent == ["20250101-report", "20250102-report"] and len(inbox.envelopes) == 2


class Picky(Inbox):
    """Refuses some recipients once each (RCPT TO), accepts the rest."""

    def __init__(self, refusals: dict[str, str]):
        super().__init__()
        self.refusals = refusals

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.refusals:
            return self.refusals.pop(address)
        envelope.rcpt_tos.append(address)
        return "250 OK"


def test_recipients_refused_for_now_get_the_email_later_and_those_refused_for_good_a_dead_letter(email, tmp_path):
    outbox = Outbox(tmp_path / "outbox")
    team = ["ml-team@example.org", "oncall@example.org", "gone@example.org"]
    outbox.put("20250101-report", email_message(email, team, "mavias@example.org"))
    inbox = Picky({"oncall@example.org": "450 4.2.0 greylisted, try again later",
                   "gone@example.org": "550 5.1.1 no such mailbox"})
    with smtp_server(inbox) as server:
        first = outbox.deliver(settings(server.port))
        assert [e.rcpt_tos for e in inbox.envelopes] == [["ml-team@example.org"]]
        assert "oncall@example.org: 450" in first.failed["20250101-report"] and outbox.pending() == ["20250101-report"]
        assert "gone@example.org: 550" in first.dead["20250101-report-refused-1"]
        assert list(outbox.unreported_dead()) == ["20250101-report-refused-1"]  # named in the next report
        second = outbox.deliver(settings(server.port))
    assert second.sent == ["20250101-report"] and not second.failed and outbox.pending() == []
    assert [e.rcpt_tos for e in inbox.envelopes] == [["ml-team@example.org"], ["oncall@example.org"]]


class SizeLimited(Inbox):
    """Refuses the first message at MAIL FROM as too large (552), as Postfix does from the SIZE it is told."""

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if not self.calls:
            self.calls += 1
            return "552 5.3.4 Message size exceeds fixed limit"
        envelope.mail_from = address
        return "250 OK"


def test_an_email_too_large_for_the_server_is_a_dead_letter_not_a_refused_session(email, tmp_path):
    outbox = Outbox(tmp_path / "outbox")
    for name in ("20250101-report", "20250102-report"):
        outbox.put(name, email_message(email, RECIPIENTS, "mavias@example.org"))
    inbox = SizeLimited()
    with smtp_server(inbox) as server:
        delivery = outbox.deliver(settings(server.port))
    assert delivery.refused_session is None and "552" in delivery.dead["20250101-report"]
    assert delivery.sent == ["20250102-report"] and outbox.pending() == []  # the later email was not blocked


def test_a_try_counter_a_kill_left_unreadable_counts_again_from_its_start(email, tmp_path):
    outbox = Outbox(tmp_path / "outbox")
    outbox.put("20250101-report", email_message(email, RECIPIENTS, "mavias@example.org"))
    (outbox.folder / "20250101-report.tries").write_bytes(b"")  # cut while written
    with smtp_server(Inbox(*["451 4.3.0 try again later"] * 2)) as server:
        delivery = outbox.deliver(settings(server.port, max_attempts=2, retry_wait_s=0.01))
    assert list(delivery.failed) == ["20250101-report"] and outbox.pending() == ["20250101-report"]
    assert (outbox.folder / "20250101-report.tries").read_text() == "1"


def test_an_email_that_keeps_failing_becomes_a_dead_letter_after_its_tries(email, tmp_path):
    outbox = Outbox(tmp_path / "outbox")
    outbox.put("20250101-report", email_message(email, RECIPIENTS, "mavias@example.org"))
    unreachable = settings(free_port(), max_attempts=1, timeout=1)
    for _ in range(MAX_DELIVERY_TRIES - 1):
        assert list(outbox.deliver(unreachable).failed) == ["20250101-report"]  # kept for the next night
    assert list(outbox.deliver(unreachable).dead) == ["20250101-report"] and outbox.pending() == []
