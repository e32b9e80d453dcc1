"""The report's plots as PNG bytes: the paper's logit plot (bias-aligned against bias-conflicting training samples)
and the trend across nights, one tick per night; and the logit plot's input."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Literal

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from mavias.core.evaluate.metrics import require_columns
from mavias.ops.reporting.context import ReportContext
from mavias.ops.reporting.history import HistoryEntry

TREND_NIGHTS = 30
MAX_DATE_LABELS = 10  # more nights than this: every k-th night is labelled
LOGIT_PLOT, TREND_PLOT = "logit_plot.png", "trend.png"
CONFLICTING, ALIGNED = "bias-conflicting", "bias-aligned"
MODEL_COLOURS = {"ERM reference": "#64748b", "MAVias": "#ea580c"}


# --- the logit plot input (paper, Fig. "logits" of UrbanCars training samples) ---------------------------------------
def bias_alignment(labels: pd.Series, irrelevant_tags: pd.Series, biased_tags: pd.DataFrame) -> pd.Series:
    """Per sample: ``bias-aligned`` when it carries one of its class's biased tags (B'), else ``bias-conflicting``
    (an ordered categorical, conflicting first)."""
    per_class = biased_tags.groupby("class")["tag"].agg(frozenset).to_dict()
    aligned = [bool(per_class.get(label, frozenset()) & frozenset(() if tags is None else tags))
               for label, tags in zip(labels, irrelevant_tags, strict=True)]
    kinds = pd.Categorical([ALIGNED if a else CONFLICTING for a in aligned], categories=[CONFLICTING, ALIGNED],
                           ordered=True)
    return pd.Series(kinds, index=labels.index, name="bias_strength")


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
    frame = pd.DataFrame({"bias_strength": bias_strength.array, "value": values})  # a categorical keeps its order
    stats = frame.groupby("bias_strength", observed=True, sort=True)["value"].agg(["mean", "std", "size"])
    stats["ci95"] = 1.96 * stats["std"].fillna(0.0) / np.sqrt(stats["size"])
    out = stats.reset_index().rename(columns={"size": "n"})[["bias_strength", "mean", "ci95", "n"]]
    return out.assign(model=model, statistic=statistic)


# --- plots ---------------------------------------------------------------------------------------------------------
def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=150, bbox_inches="tight", facecolor="white")
    return buffer.getvalue()


def logit_plot(summary: pd.DataFrame, strength_label: str) -> bytes:
    """Grouped bars: mean main-model logit of bias-conflicting and bias-aligned training samples, ERM reference next
    to MAVias (the paper's logit figure); each bar is labelled with its sample count."""
    models = list(dict.fromkeys(summary["model"]))
    levels = list(dict.fromkeys(summary["bias_strength"]))  # in the order written: conflicting, then aligned
    fig = Figure(figsize=(6.8, 3.2))
    ax = fig.subplots()
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        rows = summary[summary["model"] == model].set_index("bias_strength").reindex(levels)
        x = np.arange(len(levels)) + (i - (len(models) - 1) / 2) * width
        bars = ax.bar(x, rows["mean"], width, yerr=rows["ci95"], capsize=3, label=model,
                      color=MODEL_COLOURS.get(model), edgecolor="white")
        ax.bar_label(bars, labels=[f"n={int(n)}" if pd.notna(n) else "" for n in rows["n"]], fontsize=7, padding=2)
    ax.set_xticks(np.arange(len(levels)), [str(level) for level in levels])
    statistic = summary["statistic"].iloc[0]
    ax.set_ylabel("true-class logit $z_{main}[y]$" if statistic == "true_class" else "$\\|z_{main}\\|_2$")
    ax.set_xlabel(strength_label)
    ax.axhline(0, color="#9ca3af", linewidth=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, loc="best")
    ax.set_title("Training samples: mean logit, bias-conflicting vs bias-aligned (95% CI)", fontsize=10)
    return _png(fig)


def trend_plot(history: list[HistoryEntry]) -> bytes:
    return _png(trend_figure(history))


def trend_figure(history: list[HistoryEntry]) -> Figure:
    """Worst-group and average accuracy per night, one tick per night labelled with its date (never hours);
    filled markers = promoted."""
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
    ax.set_xlabel("night")
    step = -(-len(dates) // MAX_DATE_LABELS)
    ax.set_xticks(dates, [d.isoformat() if i % step == 0 else "" for i, d in enumerate(dates)])
    ax.tick_params(axis="x", labelrotation=30 if len(dates) > 4 else 0, labelsize=8)
    if len(dates) == 1:
        ax.set_xlim(dates[0] - timedelta(days=1), dates[0] + timedelta(days=1))
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3)
    return fig


def render_plots(context: ReportContext) -> dict[str, bytes]:
    """Plot file name -> PNG bytes, for the plots the context has data for."""
    plots = {}
    summary = context.logit_summary
    if summary is not None and summary["bias_strength"].astype(str).nunique() > 1:  # aligned and conflicting
        plots[LOGIT_PLOT] = logit_plot(summary, context.bias_strength_label)
    if context.history:
        plots[TREND_PLOT] = trend_plot(context.history)
    return plots
