"""Run an audit: every step in turn under one progress display, each step's output path printed as it finishes."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mavias.ops.audit import steps
from mavias.ops.audit.options import PARTITION, AuditOptions, audit_version
from mavias.ops.audit.report import write_outputs
from mavias.utils.progress import StepProgress, progress_line


@dataclass(frozen=True)
class AuditResult:
    report: Path
    model: Path
    biased_tags: Path
    evidence: Path  # every (class, tag) pair tested, with why it is or is not in B'
    relevance: Path  # the relevance decisions B' and MAVias used (the input of `mavias judge export-review`)
    caveats: list[str]
    trust: list[str]  # how far the tags and relevance decisions behind B' can be trusted (trust_lines)
    evaluation: dict  # MAVias's evaluate_checkpoint result
    gates_passed: bool


def _plan(audit: steps.Audit, name: str, version: str) -> list[tuple[str, Callable[[], Path]]]:
    return [
        ("import", lambda: steps.import_data(audit)),
        ("tag, judge, encode", lambda: steps.discover(audit)),
        ("ERM reference and its biased tags", lambda: steps.reference(audit)),
        ("MAVias", lambda: steps.mavias(audit)),
        ("evaluate and gate", lambda: steps.evaluate(audit)),
        ("export ONNX", lambda: steps.export(audit, name, version)),
        ("report", lambda: write_outputs(audit, name, version)),
    ]


def default_model_name(folder: Path) -> str:
    """The data folder's name as a model name the registry accepts ("My Photos (2024)" -> "My-Photos-2024")."""
    name = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]+", "-", folder.name))
    name = name.lstrip("._-")[:128].rstrip("._-")
    return name or "model"


def run_audit(options: AuditOptions) -> AuditResult:
    """Import, tag, judge, the ERM reference, MAVias, evaluate, export and report into ``options.out``; a second run
    resumes where the first stopped."""
    audit = steps.begin(options)
    folder = options.path.resolve().parent if options.path.is_file() else options.path.resolve()
    name = options.name or default_model_name(folder)
    version = audit_version(audit.state.document["inputs"], audit.state.document.get("review"))
    plan = _plan(audit, name, version)
    progress = StepProgress(len(plan), desc="audit", enabled=options.progress)
    try:
        for number, (label, step) in enumerate(plan, 1):
            start = time.perf_counter()
            with progress.step(label):
                path = step()
            if options.progress:
                progress_line(f"[{number}/{len(plan)}] {label}: {path} ({time.perf_counter() - start:.0f} s)")
    finally:
        progress.close()
    return AuditResult(audit.paths.report, audit.paths.model, audit.paths.biased_tags,
                       audit.paths.reference / "shortcut_evidence.csv", audit.workspace.relevance(PARTITION),
                       audit.state.document["caveats"], audit.state.document["trust"],
                       audit.evaluations["mavias"], audit.gates.passed)
