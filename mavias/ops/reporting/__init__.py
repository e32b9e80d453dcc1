"""The nightly report: the HTML page with its plots, the history of nights, and the email with its outbox.

- :mod:`mavias.ops.reporting.context`: :class:`ReportContext`, everything a report shows;
- :mod:`mavias.ops.reporting.history`: headline numbers per night (trend plot, bias drift);
- :mod:`mavias.ops.reporting.plots`: the logit plot and the trend plot;
- :mod:`mavias.ops.reporting.render`: HTML, plain text, email content, ``write_report``;
- :mod:`mavias.ops.reporting.mail`: SMTP delivery and the outbox that keeps what could not be sent.
"""
