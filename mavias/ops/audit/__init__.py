"""`mavias audit`: a folder of images (an ImageFolder, a published dataset layout, or a manifest) audited in one
command, on the same stage functions as the nightly flow, into the same HTML report.

- :mod:`mavias.ops.audit.options`: what an audit is asked (:class:`AuditOptions`), its folder and its resumable state;
- :mod:`mavias.ops.audit.steps`: import, discover, reference, MAVias, evaluate and gate, export;
- :mod:`mavias.ops.audit.report`: the report, ``biased_tags.csv`` and the caveats every output carries;
- :mod:`mavias.ops.audit.run`: :func:`run_audit`, the steps under one progress display.
"""

from mavias.ops.audit.options import AuditOptions
from mavias.ops.audit.run import AuditResult, run_audit

__all__ = ["AuditOptions", "AuditResult", "run_audit"]
