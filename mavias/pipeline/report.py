"""The nightly HTML bias report: promotion verdict, gates, validation, per-group accuracy, biased tags, the paper's
logit plot, trends across nights and the ONNX export.

The template uses inline styles and tables only (no <style>, no JavaScript) so it reads the same in a browser and
in mail clients. Plots are PNGs; the template takes a plot name -> image source mapping, so the saved report embeds
them as ``data:`` URIs and the email references them as ``cid:`` parts (:func:`render_email`).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from email.utils import make_msgid
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jinja2
import numpy as np
import pandas as pd
from matplotlib.dates import ConciseDateFormatter
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict, Field

from mavias.evaluate.metrics import MIN_SUPPORT, require_columns
from mavias.judging.evaluate import ClassChanges
from mavias.pipeline.export import VerificationResult
from mavias.pipeline.gates import GateReport, GateResult
from mavias.utils.atomic import atomic_path, write_json

TEMPLATE_DIR = Path(__file__).with_name("templates")
TOP_K = 10
CHANGED_TAGS_SHOWN = 12  # per list and class; the rest is counted ("… and N more")
CHANGED_CLASSES_SHOWN = 25
TREND_NIGHTS = 30
HISTORY_SCHEMA = 1
LOGIT_PLOT, TREND_PLOT = "logit_plot.png", "trend.png"
MODEL_COLOURS = {"ERM reference": "#64748b", "MAVias": "#ea580c"}
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
}


# --- history of nights ---------------------------------------------------------------------------------------------
class HistoryEntry(BaseModel):
    """One night's headline numbers, kept next to the models for the trend plot and the bias drift."""

    date: date
    run_id: str
    version: str
    worst_group_accuracy: float
    worst_group_ci_low: float | None = None
    worst_group_ci_high: float | None = None
    average_accuracy: float
    biased_tags: dict[str, list[str]]  # class -> top-k biased tags, in rank order
    promoted: bool


def history_entry(
    *,
    night: date,
    run_id: str,
    version: str,
    evaluation: Mapping[str, Any],
    wg_source: str,
    biased_tags: pd.DataFrame,
    promoted: bool,
) -> HistoryEntry:
    """Tonight's entry from the candidate's evaluate_checkpoint result and the reference's biased tags."""
    metrics = evaluation[wg_source]
    return HistoryEntry(
        date=night,
        run_id=run_id,
        version=version,
        worst_group_accuracy=metrics["worst_group_accuracy"],
        worst_group_ci_low=metrics["worst_group_ci_low"],
        worst_group_ci_high=metrics["worst_group_ci_high"],
        average_accuracy=metrics["average_accuracy"],
        biased_tags=biased_tags_by_class(biased_tags),
        promoted=promoted,
    )


def load_history(path: str | Path) -> list[HistoryEntry]:
    """Past nights, oldest first; an empty list when the file does not exist yet."""
    path = Path(path)
    return history_from_document(json.loads(path.read_text()), str(path)) if path.exists() else []


def history_from_document(document: Mapping[str, Any], source: str) -> list[HistoryEntry]:
    if document["schema"] != HISTORY_SCHEMA:
        raise ValueError(f"{source}: history schema {document['schema']}, expected {HISTORY_SCHEMA}")
    return [HistoryEntry.model_validate(night) for night in document["nights"]]


def append_history(path: str | Path, *entries: HistoryEntry) -> list[HistoryEntry]:
    """Add ``entries`` (each replacing one with the same run id, so a retried task does not count twice, and a
    night recorded while the bucket was unreachable is merged, not lost); the new history."""
    replaced = {entry.run_id for entry in entries}
    nights = [night for night in load_history(path) if night.run_id not in replaced] + list(entries)
    nights.sort(key=lambda night: night.date)
    write_json(path, {"schema": HISTORY_SCHEMA, "nights": [night.model_dump(mode="json") for night in nights]})
    return nights


def biased_tags_by_class(biased_tags: pd.DataFrame, top_k: int = TOP_K) -> dict[str, list[str]]:
    """Class -> its top-k biased tags in rank order (a biased tags table of :func:`find_biased_tags`)."""
    require_columns(biased_tags, ["class", "tag", "rank"])
    top = biased_tags[biased_tags["rank"] <= top_k].sort_values(["class", "rank"])
    return {str(c): list(tags) for c, tags in top.groupby("class", sort=True)["tag"]}


def bias_drift(previous: Mapping[str, list[str]], current: Mapping[str, list[str]]) -> pd.DataFrame:
    """Per class: tags biased now but not in ``previous`` (``new``) and the other way round (``gone``)."""
    rows = []
    for name in sorted(set(previous) | set(current)):
        before, now = set(previous.get(name, [])), set(current.get(name, []))
        if before != now:
            rows.append({"class": name, "new": sorted(now - before), "gone": sorted(before - now)})
    return pd.DataFrame(rows, columns=["class", "new", "gone"])


# --- relevance decisions against the previous night -------------------------------------------------------------
class RelevanceChanges(BaseModel):
    """``nights/<night>/relevance_changes.json``: how tonight's relevance decisions differ from those of the previous
    night that recorded a relevance table (:func:`~mavias.judging.evaluate.decision_changes`)."""

    version: Literal[1] = 1
    night: str
    previous_night: str | None  # None: the first night with a relevance table, nothing to compare
    relevance: str  # tonight's relevance table, to export for review
    review: str | None = None  # the reviewed decisions applied tonight (discovery.review)
    classes: dict[str, ClassChanges] = {}  # only classes with a changed or new decision

    def review_hint(self) -> str:
        """The exact commands that correct a wrong decision for the next night."""
        if self.review:
            return f"To correct a decision, edit {self.review} (put the tag under its class's relevant or irrelevant " \
                   "list); the next night that trains applies it, and `mavias judge run --review` takes the same file."
        return f"To correct a decision: mavias judge export-review {self.relevance} --out review.yaml, keep only the " \
               "tags you correct, and set discovery.review: review.yaml in the nightly config (or " \
               "MAVIAS_NIGHTLY__DISCOVERY__REVIEW); the next night that trains applies it, and " \
               "`mavias judge run --review review.yaml` takes the same file."


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


# --- the logit plot input (paper, Fig. "logits" of UrbanCars training samples) ---------------------------------------
def biased_tag_count(
    labels: pd.Series, irrelevant_tags: pd.Series, biased_tags: pd.DataFrame, *, cap: int = 3
) -> pd.Series:
    """Bias strength of each sample: how many of its class's biased tags it carries, capped (``"3+"``)."""
    per_class = biased_tags.groupby("class")["tag"].agg(frozenset).to_dict()
    counts = [
        len(per_class.get(label, frozenset()) & frozenset(() if tags is None else tags))
        for label, tags in zip(labels, irrelevant_tags)
    ]
    names = [str(min(c, cap)) + ("+" if c >= cap else "") for c in counts]
    categories = [str(c) for c in range(cap)] + [f"{cap}+"]
    strength = pd.Categorical(names, categories=categories, ordered=True)
    return pd.Series(strength, index=labels.index, name="bias_strength")


def logit_summary(
    predictions: pd.DataFrame,
    bias_strength: pd.Series,
    *,
    model: str,
    statistic: Literal["true_class", "norm"] = "true_class",
) -> pd.DataFrame:
    """Mean main-model logit of (training) samples per bias strength, with a 95% normal interval half-width.

    ``predictions`` has ``label`` (int) and ``logit_<k>`` columns; ``true_class`` takes z_main[y], ``norm`` takes
    ||z_main||_2. A categorical ``bias_strength`` keeps its category order.
    """
    logit_cols = sorted((c for c in predictions.columns if c.startswith("logit_")), key=lambda c: int(c[6:]))
    if not logit_cols:
        raise KeyError("the predictions table has no logit_<k> columns")
    require_columns(predictions, ["label"])
    logits = predictions[logit_cols].to_numpy(dtype=float)
    if statistic == "true_class":
        values = logits[np.arange(len(logits)), predictions["label"].to_numpy()]
    else:
        values = np.linalg.norm(logits, axis=1)
    frame = pd.DataFrame({"bias_strength": bias_strength.to_numpy(), "value": values})
    stats = frame.groupby("bias_strength", observed=True, sort=True)["value"].agg(["mean", "std", "size"])
    stats["ci95"] = 1.96 * stats["std"].fillna(0.0) / np.sqrt(stats["size"])
    out = stats.reset_index().rename(columns={"size": "n"})[["bias_strength", "mean", "ci95", "n"]]
    return out.assign(model=model, statistic=statistic)


# --- context ---------------------------------------------------------------------------------------------------------
class DiscoveryCounts(BaseModel):
    images_tagged: int = Field(ge=0)
    llm_requests: int = Field(ge=0)
    encodings: int = Field(ge=0)


class ReportContext(BaseModel):
    """Everything the report shows; the nightly pipeline fills it from the artifacts of the run."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    model_name: str
    version: str
    run_id: str
    created: datetime
    promoted: bool
    production_version: str | None  # production after this run
    serving_updated: bool = True  # False: the configured InferenceService could not be pointed at production
    model_uri: str | None = None
    notes: list[str] = []  # e.g. why promotion did not happen although every gate passed
    gates: GateReport
    validations: dict[str, dict[str, Any]]  # partition -> ValidationResult.to_dict()
    candidate_groups: pd.DataFrame  # group table (evaluate_checkpoint "tables") of the gates' wg_source
    reference_groups: pd.DataFrame
    biased_tags: pd.DataFrame  # find_biased_tags table of the ERM reference
    logit_summary: pd.DataFrame | None = None  # logit_summary() rows of the ERM reference and of MAVias
    bias_strength_label: str = "biased tags of its class present in the sample"
    history: list[HistoryEntry] = []  # past nights and tonight's entry (append_history before rendering)
    discovery: DiscoveryCounts | None = None
    verification: VerificationResult | None = None
    onnx_sha256: str | None = None
    latency: dict[str, Any] | None = None  # export_latency_benchmark()
    tuning: dict[str, Any] | None = None  # nightly.select_candidate()["tuning"]: trials and the chosen settings
    attempt: int = 1  # reports of one night are immutable: a rerun (cleared run) writes attempt 2, 3, ...
    original_outcome: str | None = None  # on a rerun: attempt 1's verdict (its email subject)
    relevance_changes: RelevanceChanges | None = None  # None: nothing was judged tonight


# --- view model ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Headline:
    promoted: bool
    title: str
    reasons: list[str]
    next_steps: list[str]


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


def headline(context: ReportContext) -> Headline:
    """The verdict, why, and what the reader should do next."""
    gates, checked = context.gates, [g for g in context.gates.results if g.status != "skipped"]
    failed_partitions = _failed_partitions(context)
    partition_lines = [f"partition {name}: validation {r['summary']}" for name, r in failed_partitions.items()]
    partition_steps = [
        f"Fix partition {name} at the source, then delete quarantine/{name}/validation.json so that the next "
        "night retries it."
        for name in failed_partitions
    ]
    if context.promoted:
        skipped = ", ".join(g.name for g in gates.skipped) or "none"
        verdict = (
            f"Promoted although gate(s) failed: {', '.join(g.name for g in gates.failed)}." if gates.failed
            else f"All {len(checked)} checked gates passed (skipped: {skipped})."
        )
        return Headline(
            True,
            f"Promoted: {context.version} is now in production",
            [verdict, *partition_lines, *context.notes],
            [f"If production misbehaves, roll back: mavias registry rollback --name {context.model_name}",
             *partition_steps],
        )
    if context.original_outcome is not None and not gates.results:
        return Headline(
            False,
            f"Rerun (attempt {context.attempt}) of a finished night: nothing new; the night's outcome stands",
            [f"Original outcome: {context.original_outcome}", *context.notes],
            ["Nothing to do."],
        )
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
    return Headline(False, f"Not promoted: {production}", reasons, steps or ["Nothing to do."])


def group_comparison(candidate: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Per candidate group: n, MAVias and ERM accuracy, their difference, the small flag; worst MAVias group first."""
    merged = candidate[["group", "n", "accuracy", "small"]].merge(
        reference[["group", "accuracy"]], on="group", how="left", suffixes=("", "_reference")
    )
    merged["delta"] = merged["accuracy"] - merged["accuracy_reference"]
    return merged.sort_values(["accuracy", "group"]).reset_index(drop=True)


def _validation_rows(context: ReportContext) -> list[dict[str, Any]]:
    rows = []
    for name, result in sorted(context.validations.items()):
        checks = result["checks"]
        rows.append({
            "partition": name,
            "success": result["success"],
            "passed": sum(bool(c["success"]) for c in checks),
            "total": len(checks),
            "failed": [c for c in checks if not c["success"]],
            "quarantined": result["quarantined"],
        })
    return rows


def _biased_tag_rows(context: ReportContext, new_tags: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    top = context.biased_tags[context.biased_tags["rank"] <= TOP_K].sort_values(["class", "rank"])
    return [
        {"class": name, "tags": [
            {"tag": row.tag, "lift": row.lift, "new": row.tag in new_tags.get(name, [])}
            for row in rows.itertuples()
        ]}
        for name, rows in top.groupby("class", sort=True)
    ]


@dataclass(frozen=True)
class Drift:
    """Tonight's history entry against the night before it (``previous`` is None on the first night)."""

    tonight: HistoryEntry
    previous: HistoryEntry | None

    def table(self) -> pd.DataFrame | None:
        return None if self.previous is None else bias_drift(self.previous.biased_tags, self.tonight.biased_tags)


def _drift(context: ReportContext) -> Drift | None:
    """None when tonight has no history entry (no candidate was evaluated)."""
    for i, night in enumerate(context.history):
        if night.run_id == context.run_id:
            return Drift(night, context.history[i - 1] if i else None)
    return None


# --- plots -----------------------------------------------------------------------------------------------------------
def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=150, bbox_inches="tight", facecolor="white")
    return buffer.getvalue()


def logit_plot(summary: pd.DataFrame, strength_label: str) -> bytes:
    """Grouped bars: mean main-model logit per bias strength, ERM reference next to MAVias (paper's logit figure)."""
    models = list(dict.fromkeys(summary["model"]))
    levels = list(dict.fromkeys(summary.sort_values("bias_strength")["bias_strength"]))
    fig = Figure(figsize=(6.8, 3.2))
    ax = fig.subplots()
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        rows = summary[summary["model"] == model].set_index("bias_strength").reindex(levels)
        x = np.arange(len(levels)) + (i - (len(models) - 1) / 2) * width
        ax.bar(x, rows["mean"], width, yerr=rows["ci95"], capsize=3, label=model,
               color=MODEL_COLOURS.get(model), edgecolor="white")
    ax.set_xticks(np.arange(len(levels)), [str(level) for level in levels])
    statistic = summary["statistic"].iloc[0]
    ax.set_ylabel("true-class logit $z_{main}[y]$" if statistic == "true_class" else "$\\|z_{main}\\|_2$")
    ax.set_xlabel(f"bias strength: {strength_label}")
    ax.axhline(0, color="#9ca3af", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, loc="best")
    ax.set_title("Training samples: mean logit by bias strength (95% CI)", fontsize=10)
    return _png(fig)


def trend_plot(history: list[HistoryEntry]) -> bytes:
    """Worst-group and average accuracy per night; filled markers = promoted."""
    nights = history[-TREND_NIGHTS:]
    dates = [night.date for night in nights]
    wg = np.array([night.worst_group_accuracy for night in nights]) * 100
    fig = Figure(figsize=(6.8, 2.8))
    ax = fig.subplots()
    lows = [night.worst_group_ci_low for night in nights]
    highs = [night.worst_group_ci_high for night in nights]
    if None not in lows and None not in highs:
        ax.fill_between(dates, np.array(lows) * 100, np.array(highs) * 100, color="#fed7aa", label="WG 95% CI")
    ax.plot(dates, wg, color=MODEL_COLOURS["MAVias"], label="worst-group acc.")
    ax.plot(dates, [night.average_accuracy * 100 for night in nights], color="#64748b", linestyle="--",
            label="average acc.")
    promoted = [night.promoted for night in nights]
    ax.scatter(dates, wg, s=28, zorder=3, edgecolors=MODEL_COLOURS["MAVias"],
               facecolors=[MODEL_COLOURS["MAVias"] if p else "white" for p in promoted])
    ax.set_ylabel("accuracy (%)")
    ax.xaxis.set_major_formatter(ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3)
    return _png(fig)


def render_plots(context: ReportContext) -> dict[str, bytes]:
    """Plot file name -> PNG bytes, for the plots the context has data for."""
    plots = {}
    if context.logit_summary is not None and not context.logit_summary.empty:
        plots[LOGIT_PLOT] = logit_plot(context.logit_summary, context.bias_strength_label)
    if context.history:
        plots[TREND_PLOT] = trend_plot(context.history)
    return plots


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
    """The report as HTML; ``image_sources`` maps plot names to ``src`` values (default: ``data:`` URIs)."""
    if image_sources is None:
        image_sources = {name: data_uri(png) for name, png in render_plots(context).items()}
    drift = _drift(context)
    changes = None if drift is None else drift.table()
    new_tags = {} if changes is None else dict(zip(changes["class"], changes["new"]))
    return _environment().get_template("report.html.j2").render(
        c=context,
        headline=headline(context),
        groups=group_comparison(context.candidate_groups, context.reference_groups).to_dict("records"),
        min_support=MIN_SUPPORT,
        validations=_validation_rows(context),
        biased=_biased_tag_rows(context, new_tags),
        drift=drift,
        changes=None if changes is None else changes.to_dict("records"),
        images=image_sources,
        logit_plot=LOGIT_PLOT,
        trend_plot=TREND_PLOT,
        top_k=TOP_K,
        relevance=context.relevance_changes,
        changed_classes=changed_classes(context.relevance_changes) if context.relevance_changes else [],
        classes_shown=CHANGED_CLASSES_SHOWN,
    )


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def subject_line(context: ReportContext) -> str:
    if context.original_outcome is not None and not context.promoted and not context.gates.results:
        return f"[mavias] {context.model_name} {context.run_id}: rerun, attempt {context.attempt} " \
               f"(original outcome: {context.original_outcome.removeprefix('[mavias] ')})"
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
    lines += _relevance_text(context.relevance_changes)
    if context.model_uri:
        lines += ["", f"Model and full report: {context.model_uri}"]
    return "\n".join(lines) + "\n"


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


@dataclass(frozen=True)
class EmailContent:
    subject: str
    html: str  # references its images as cid:<content id>
    text: str
    images: dict[str, bytes]  # content id (without <>) -> PNG


def render_email(context: ReportContext) -> EmailContent:
    plots = render_plots(context)
    content_ids = {name: make_msgid(idstring=Path(name).stem, domain="mavias.report")[1:-1] for name in plots}
    html = render_report(context, {name: f"cid:{cid}" for name, cid in content_ids.items()})
    images = {content_ids[name]: png for name, png in plots.items()}
    return EmailContent(subject_line(context), html, render_text(context), images)


def write_report(out_dir: str | Path, context: ReportContext) -> Path:
    """``report.html`` (plots embedded as data URIs) plus each plot as a PNG file in ``out_dir``."""
    out_dir = Path(out_dir)
    plots = render_plots(context)
    for name, png in plots.items():
        with atomic_path(out_dir / name) as tmp:
            tmp.write_bytes(png)
    html_path = out_dir / "report.html"
    with atomic_path(html_path) as tmp:
        tmp.write_text(render_report(context, {name: data_uri(png) for name, png in plots.items()}), encoding="utf-8")
    return html_path
