"""`mavias audit`: a folder of images (an ImageFolder, a published dataset layout, or a manifest) audited in one
command, on the same stage functions as the nightly flow, into the same HTML report.

- :mod:`mavias.audit.options`: what an audit is asked (:class:`AuditOptions`), its folder and its resumable state;
- :mod:`mavias.audit.steps`: import, discover, reference, MAVias, evaluate and gate, export;
- :mod:`mavias.audit.report`: the report, ``biased_tags.csv`` and the caveats every output carries;
- :mod:`mavias.audit.run`: :func:`run_audit`, the steps under one progress display.
"""

from mavias.audit.options import AuditOptions, TaggerSettings
from mavias.audit.run import AuditResult, run_audit

__all__ = ["AuditOptions", "AuditResult", "TaggerSettings", "run_audit"]
