"""The nightly HTML bias report: promotion verdict, gates, validation, per-group accuracy, biased tags, the paper's
logit plot, trends across nights and the ONNX export; its plain-text summary and email content.

The template uses inline styles and tables only (no <style>, no JavaScript) so it reads the same in a browser and
in mail clients. Plots and the shortcuts' example strips are PNGs; the template takes an image name -> image source
mapping, so the saved report embeds them as ``data:`` URIs and the email references them as ``cid:`` parts
(:func:`render_email`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import make_msgid
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal

import jinja2
import pandas as pd

from mavias.core.evaluate.metrics import worst_first
from mavias.core.evaluate.shortcuts import MIN_CROSS_AUC, MIN_CROSS_SUPPORT, MIN_ODDS_RATIO
from mavias.core.judging.quality import ClassChanges
from mavias.ops.gates import GateResult
from mavias.ops.reporting.context import RelevanceChanges, ReportContext
from mavias.ops.reporting.examples import MAX_BYTES, example_images
from mavias.ops.reporting.history import TOP_K, HistoryEntry, bias_drift
from mavias.ops.reporting.mail import EmailContent
from mavias.ops.reporting.plots import LOGIT_PLOT, TREND_PLOT, render_plots
from mavias.ops.reporting.shortcut_view import WITHIN_ONLY, WITHIN_ONLY_MEANING, class_shortcuts, shortcut_lines
from mavias.utils.atomic import atomic_path, write_bytes

TEMPLATE_DIR = Path(__file__).with_name("templates")
CHANGED_TAGS_SHOWN = 12  # per list and class; the rest is counted ("… and N more")
CHANGED_CLASSES_SHOWN = 25
SYMBOLS = {">=": "≥", "<=": "≤", ">": ">"}
NEXT_STEPS = {
    "min_worst_group_accuracy": "Look at the worst group in the per-group table and the top biased tags of its class: "
    "they are the shortcuts the model still uses. More bias-conflicting images of that class help most.",
    "must_beat_reference": "MAVias did not beat the ERM reference on the worst group: check the irrelevant-tag "
    "judgements of the weakest class (a relevant tag marked irrelevant, or a shortcut marked relevant).",
    "min_group_support": "The worst group is too small to judge; collect more images of it before trusting its score.",
    "max_abs_bg_gap": "The background gap is too large: the model still relies on the scene.",
    "max_abs_coobj_gap": "The co-occurring-object gap is too large: the model still relies on other objects.",
    "max_abs_both_gap": "The model fails when background and co-occurring object both conflict with the class.",
    "max_regression_vs_production": "Tonight's model is worse than production beyond the tolerance even at the top "
    "of its confidence interval: compare the per-group tables and the bias drift below.",
    "max_validation_drop_vs_reference": "MAVias fits the validation images far worse than the plain reference: its "
    "main model stopped learning (a bias path that explains nearly every label leaves it little to learn from). "
    "Train with a higher learning rate (optim.lr) or the joint bias path (mavias.bias_path: joint): --set KEY=VALUE "
    "for mavias train or mavias audit, train.overrides in the nightly config.",
}


def capped(tags: list[str], limit: int = CHANGED_TAGS_SHOWN) -> str:
    """The first ``limit`` tags, then how many more."""
    more = f" … and {len(tags) - limit} more" if len(tags) > limit else ""
    return ", ".join(tags[:limit]) + more or "–"


def changed_classes(changes: RelevanceChanges) -> list[tuple[str, ClassChanges]]:
    """Classes with flipped decisions first (they need a look), most changes first, then those with new tags only."""
    def order(item: tuple[str, ClassChanges]) -> tuple[int, int, str]:
        flips = len(item[1].became_relevant) + len(item[1].became_irrelevant)
        return -flips, -item[1].tags, item[0]

    return sorted(changes.classes.items(), key=order)


# --- view model ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Headline:
    title: str
    reasons: list[str]
    next_steps: list[str]
    tone: Literal["passed", "failed", "blocked", "routine"]  # the headline's colour; passed: promoted, or an audit
    # whose gates all passed


def percent(fraction: float | None) -> str:
    return "–" if fraction is None or pd.isna(fraction) else f"{100 * fraction:.1f}%"


def format_value(value: float | int | None) -> str:
    """Counts as integers, fractions (accuracies, gaps) as percentages."""
    return f"{value:,}" if isinstance(value, int) else percent(value)


def _gate_line(gate: GateResult) -> str:
    if gate.status == "skipped":
        return f"{gate.title} ({gate.name}): skipped, {gate.detail}"
    return (
        f"{gate.title} ({gate.name}): {format_value(gate.value)}, required {SYMBOLS[gate.comparison]} "
        f"{format_value(gate.threshold)}; {gate.detail}"
    )


def percentage_points(delta: float | None) -> str:
    if delta is None or pd.isna(delta):
        return "–"
    return f"{round(100 * delta, 1) + 0.0:+.1f} pp"  # + 0.0 turns -0.0 into 0.0


def signed_colour(delta: float | None) -> str:
    """Green for a gain, red for a loss, grey for none (or unknown), at the displayed precision."""
    rounded = 0.0 if delta is None or pd.isna(delta) else round(100 * delta, 1)
    return "#166534" if rounded > 0 else "#991b1b" if rounded < 0 else "#6b7280"


def _failed_partitions(context: ReportContext) -> dict[str, dict[str, Any]]:
    return {name: result for name, result in context.validations.items() if not result["success"]}


def _audit_headline(context: ReportContext) -> Headline:
    failed = context.gates.failed
    verdict = f"{len(failed)} gate(s) failed" if failed else "every checked gate passed"
    serve = [f"Serve the model: mavias serve --model-dir {Path(context.model_uri).parent}"] if context.model_uri else []
    return Headline(f"Audit of {context.model_name}: {verdict}", [_gate_line(g) for g in failed] + context.notes,
                    [NEXT_STEPS[g.name] for g in failed] + serve, "blocked" if failed else "passed")


def _partition_lines(context: ReportContext) -> tuple[list[str], list[str]]:
    """Failed partitions and ignored incoming folders: a line each, and what to do about them."""
    failed = _failed_partitions(context)
    lines = [f"partition {name}: validation {r['summary']}" for name, r in failed.items()]
    steps = [f"Fix partition {name} at the source, then delete quarantine/{name}/validation.json so that the next "
             "night retries it." for name in failed]
    if context.unsafe_folders:
        lines.append(f"ignored incoming folder(s) with unsafe names: {', '.join(context.unsafe_folders)}")
        steps.append("Rename those folders to letters, digits, '.', '_' and '-' (no '/', no '..'): the next night "
                     "takes them.")
    return lines, steps


def _problem_headline(context: ReportContext, lines: list[str], steps: list[str]) -> Headline:
    problem = context.problem
    if problem.kind == "data_rejected":  # the problem lists the partitions itself
        lines, steps = lines[len(_failed_partitions(context)):], steps[len(_failed_partitions(context)):]
    gate_lines = [_gate_line(g) for g in context.gates.failed]
    return Headline(problem.title, [*problem.reasons, *gate_lines, *lines, *context.notes],
                    [*problem.next_steps, *steps], problem.severity)


def headline(context: ReportContext) -> Headline:
    """The verdict, why, and what the reader should do next."""
    if context.audit:
        return _audit_headline(context)
    gates, checked = context.gates, [g for g in context.gates.results if g.status != "skipped"]
    partition_lines, partition_steps = _partition_lines(context)
    problem = context.problem
    if context.promoted:
        skipped = ", ".join(g.name for g in gates.skipped) or "none"
        verdict = (
            f"Promoted although gate(s) failed: {', '.join(g.name for g in gates.failed)}." if gates.failed
            else f"All {len(checked)} checked gates passed (skipped: {skipped})."
        )
        return Headline(
            f"Promoted: {context.version} is now in production",
            [verdict, *partition_lines, *context.notes],
            [f"If production misbehaves, roll back: mavias registry rollback --name {context.model_name}",
             *partition_steps],
            "passed",
        )
    if problem is not None and problem.severity == "failed":
        return _problem_headline(context, partition_lines, partition_steps)
    if context.original_outcome is not None and not gates.results:
        return Headline(
            f"Rerun (attempt {context.attempt}) of a finished night: nothing new; the night's outcome stands",
            [f"Original outcome: {context.original_outcome}", *(problem.reasons if problem else []), *context.notes],
            ["Nothing to do."],
            "routine",
        )
    if problem is not None:
        return _problem_headline(context, partition_lines, partition_steps)
    production = (f"production stays {context.production_version}" if context.production_version
                  else "there is no production model yet")
    reasons = [_gate_line(g) for g in gates.failed] + partition_lines + context.notes
    steps = [NEXT_STEPS[g.name] for g in gates.failed] + partition_steps
    if not gates.results and not reasons:
        reasons.append("No candidate model was evaluated tonight.")
    if gates.results and gates.passed:
        if not context.notes:
            reasons.append("Every gate passed but the model was not promoted; see the pipeline logs.")
        steps.append(f"To promote by hand: mavias registry promote {context.version} --name {context.model_name}")
    title = (f"Not promoted, blocked by the quality gates: {production}" if gates.failed
             else f"Not promoted: {production}")
    return Headline(title, reasons, steps or ["Nothing to do."], "blocked" if gates.failed else "failed")


def group_comparison(candidate: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Per candidate group: n, MAVias and ERM accuracy, their difference, the small flag; worst MAVias group first."""
    merged = candidate[["group", "n", "accuracy", "small"]].merge(
        reference[["group", "accuracy"]], on="group", how="left", suffixes=("", "_reference")
    )
    merged["delta"] = merged["accuracy"] - merged["accuracy_reference"]
    return worst_first(merged).reset_index(drop=True)


def _validation_rows(context: ReportContext) -> list[dict[str, Any]]:
    rows = []
    for name, result in sorted(context.validations.items()):
        checks = result["checks"]
        rows.append({
            "partition": name,
            "success": result["success"],
            "summary": result["summary"],
            "passed": sum(bool(c["success"]) for c in checks),
            "total": len(checks),
            "failed": [c for c in checks if not c["success"] and c.get("blocking", True)],
            "warnings": [c for c in checks if not c["success"] and not c.get("blocking", True)],
            "notes": [c for c in checks if c["success"] and c.get("source") == "mavias" and c.get("details")
                      and c["observed"] is not None],
            "quarantined": result["quarantined"],
        })
    return rows


@dataclass(frozen=True)
class Drift:
    """Tonight's history entry against the night before it (``previous`` is None on the first night)."""

    tonight: HistoryEntry
    previous: HistoryEntry | None

    @cached_property
    def table(self) -> pd.DataFrame | None:
        return None if self.previous is None else bias_drift(self.previous.biased_tags, self.tonight.biased_tags)

    @cached_property
    def rule_note(self) -> str:
        """Why some drift may not be the data's: the B' rule changed between the two nights ("" when it did not, or
        nothing drifted)."""
        if self.previous is None or self.previous.audit_rule == self.tonight.audit_rule or self.table.empty:
            return ""
        before = "an earlier version" if self.previous.audit_rule is None else f"version {self.previous.audit_rule}"
        return (f"The shortcut rule (B') changed since {self.previous.date} ({before}, tonight version "
                f"{self.tonight.audit_rule}): shortcuts marked new or no longer found may follow the rule, not the "
                "data; the next night compares like with like.")


def _drift(context: ReportContext) -> Drift | None:
    """None when tonight has no history entry (no candidate was evaluated)."""
    for i, night in enumerate(context.history):
        if night.run_id == context.run_id:
            return Drift(night, context.history[i - 1] if i else None)
    return None


# --- rendering -------------------------------------------------------------------------------------------------------
@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR), autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["value"] = format_value
    env.filters["pct"] = percent
    env.filters["pp"] = percentage_points
    env.filters["signed_colour"] = signed_colour
    env.filters["capped"] = capped
    env.globals["symbols"] = SYMBOLS
    return env


def render_report(context: ReportContext, image_sources: Mapping[str, str] | None = None) -> str:
    """The report as HTML; ``image_sources`` maps image names (plots, example strips) to ``src`` values (default:
    ``data:`` URIs; a plot left out is not shown, an example strip left out is embedded)."""
    if image_sources is None:
        image_sources = {name: data_uri(png) for name, png in render_plots(context).items()}
    strips = example_images(context.shortcut_examples)
    image_sources = {**{name: data_uri(png) for name, png in strips.items() if name not in image_sources},
                     **image_sources}
    drift = _drift(context)
    changes = None if drift is None else drift.table
    rule_note = "" if drift is None else drift.rule_note
    return _environment().get_template("report.html.j2").render(
        c=context,
        headline=headline(context),
        groups=group_comparison(context.candidate_groups, context.reference_groups).to_dict("records"),
        min_support=context.min_support,
        validations=_validation_rows(context),
        shortcuts=class_shortcuts(context, changes),
        cross_check=context.cross_check,
        drift=drift,
        changes=None if changes is None else changes.to_dict("records"),
        images=image_sources,
        logit_plot=LOGIT_PLOT,
        trend_plot=TREND_PLOT,
        top_k=TOP_K,
        example_budget_mb=f"{MAX_BYTES / 1e6:g}",
        b_rule={"odds_ratio": MIN_ODDS_RATIO, "cross_auc": MIN_CROSS_AUC, "cross_support": MIN_CROSS_SUPPORT},
        relevance=context.relevance_changes,
        changed_classes=changed_classes(context.relevance_changes) if context.relevance_changes else [],
        classes_shown=CHANGED_CLASSES_SHOWN,
        rule_note=rule_note,
        within_only=WITHIN_ONLY,
        within_only_meaning=WITHIN_ONLY_MEANING,
    )


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def subject_line(context: ReportContext) -> str:
    """The email subject: the verdict of a promotion or of the gates, else the night's problem, or a rerun's."""
    problem = None if context.promoted else context.problem
    if problem is not None and problem.severity == "failed":
        return f"[mavias] {context.model_name} {context.run_id}: {problem.subject}"
    if context.original_outcome is not None and not context.promoted and not context.gates.results:
        return f"[mavias] {context.model_name} {context.run_id}: rerun, attempt {context.attempt} " \
               f"(original outcome: {context.original_outcome.removeprefix('[mavias] ')})"
    if problem is not None:
        return f"[mavias] {context.model_name} {context.run_id}: {problem.subject}"
    failed = len(context.gates.failed)
    verdict = "promoted" if context.promoted else "NOT promoted" + (f" ({failed} gate(s) failed)" if failed else "")
    verdict += "" if context.serving_updated else ", serving NOT updated"
    return f"[mavias] {context.model_name} {context.version}: {verdict}"


def render_text(context: ReportContext) -> str:
    """Plain-text summary (the email's text/plain alternative)."""
    head = headline(context)
    lines = [head.title, "", *head.reasons, "", "Gates:"]
    lines += [f"  [{g.status.upper():7}] {_gate_line(g)}" for g in context.gates.results]
    lines += ["", "Next steps:", *(f"  - {step}" for step in head.next_steps)]
    drift = _drift(context)
    views = class_shortcuts(context, None if drift is None else drift.table)
    if views:
        note = [f"  {drift.rule_note}"] if drift is not None and drift.rule_note else []
        lines += ["", "Shortcuts found (B', per class):", *note, *shortcut_lines(views)]
    if context.trust:
        lines += ["", "How far to trust the tags behind them:", *(f"  - {line}" for line in context.trust)]
    lines += _decision_source_text(context.decision_sources)
    lines += _relevance_text(context.relevance_changes)
    if context.model_uri:
        lines += ["", f"Model and full report: {context.model_uri}"]
    return "\n".join(lines) + "\n"


def _decision_source_text(table: pd.DataFrame | None) -> list[str]:
    if table is None or table.empty:
        return []
    return ["", "Who decided relevance, per class (trained on: LLM / offline judge / human review / its own name; "
                "tonight: asked / from the cache / offline stood in / withheld from the LLM):",
            *(f"  {row['class']}: {row.llm} / {row.offline} / {row.review} / {row.own_name}; tonight "
              f"{row.tonight_judge} / {row.tonight_cache} / {row.tonight_fallback} / {row.tonight_withheld}"
              for _, row in table.iterrows())]


def _relevance_text(changes: RelevanceChanges | None) -> list[str]:
    if changes is None or changes.previous_night is None or not changes.classes:
        return []
    lines = ["", f"Relevance decisions changed since night {changes.previous_night} "
                 f"({len(changes.classes)} class(es)):"]
    for name, change in changed_classes(changes)[:CHANGED_CLASSES_SHOWN]:
        lines.append(f"  {name}: became relevant: {capped(change.became_relevant)}; became irrelevant: "
                     f"{capped(change.became_irrelevant)}; new: {len(change.new_relevant)} relevant, "
                     f"{len(change.new_irrelevant)} irrelevant")
    if len(changes.classes) > CHANGED_CLASSES_SHOWN:
        lines.append(f"  … and {len(changes.classes) - CHANGED_CLASSES_SHOWN} more classes (see the HTML report)")
    return [*lines, f"  {changes.review_hint()}"]


def render_email(context: ReportContext) -> EmailContent:
    pictures = {**render_plots(context), **example_images(context.shortcut_examples)}
    content_ids = {name: make_msgid(idstring=Path(name).stem, domain="mavias.report")[1:-1] for name in pictures}
    html = render_report(context, {name: f"cid:{cid}" for name, cid in content_ids.items()})
    images = {content_ids[name]: png for name, png in pictures.items()}
    return EmailContent(subject_line(context), html, render_text(context), images)


def write_report(out_dir: str | Path, context: ReportContext) -> Path:
    """``report.html`` (its images embedded as data URIs) plus each plot as a PNG file in ``out_dir``."""
    out_dir = Path(out_dir)
    plots = render_plots(context)
    for name, png in plots.items():
        write_bytes(out_dir / name, png)
    html_path = out_dir / "report.html"
    with atomic_path(html_path) as tmp:
        tmp.write_text(render_report(context, {name: data_uri(png) for name, png in plots.items()}), encoding="utf-8")
    return html_path
