"""The HTML bias report: sections, embedded plots, email variant, headline, nightly history and bias drift."""

from __future__ import annotations

import base64
import functools
import re
import tempfile
from datetime import UTC, date, datetime, timedelta
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mavias.core.evaluate.shortcuts import RULE_VERSION
from mavias.core.judging.quality import ClassChanges
from mavias.ops.export.verification import VerificationResult
from mavias.ops.gates import GateReport, evaluate_gates
from mavias.ops.reporting.context import DiscoveryCounts, RelevanceChanges, ReportContext
from mavias.ops.reporting.history import (
    HistoryEntry,
    append_history,
    bias_drift,
    biased_tags_by_class,
    history_entry,
    load_history,
)
from mavias.ops.reporting.plots import LOGIT_PLOT, TREND_PLOT, bias_alignment, logit_summary
from mavias.ops.reporting.render import (
    CHANGED_TAGS_SHOWN,
    headline,
    render_email,
    render_report,
    render_text,
    write_report,
)
from mavias.ops.validation import validate_partition
from tests.ops.gates.test_gates import CONFIG, evaluation
from tests.support.s3server import write_local_partition

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
VOID_ELEMENTS = {"br", "img", "meta", "hr", "link", "input"}
TAGS = {
    "bird": ["perch", "branch", "sky", "water", "twig", "tree", "blue", "brown", "sit", "tree branch", "leaf"],
    "dog": ["carpet", "couch", "blanket", "bed", "lush", "stare", "green", "white", "black", "brown", "grass"],
    "vehicle": ["road", "track", "building", "curb", "red", "load", "travel", "railroad", "train track", "sky"],
}


# --- realistic fake run ----------------------------------------------------------------------------------------------
def group_tables(rng: np.random.Generator, classes: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, reference = [], []
    for name in classes:
        for kind, n, acc, ref_acc in (("biased", 240, 0.93, 0.97), ("unbiased", 60, 0.78, 0.55)):
            n = int(n * rng.uniform(0.5, 1.5)) if name != classes[-1] or kind == "biased" else 14
            acc = float(np.clip(acc + rng.normal(0, 0.04), 0, 1))
            rows.append({"group": f"{name}|{kind}", "n": n, "correct": round(acc * n), "accuracy": round(acc * n) / n,
                         "train_proportion": np.nan, "small": n < 20})
            reference.append(rows[-1] | {"accuracy": float(np.clip(ref_acc + rng.normal(0, 0.04), 0, 1))})
    return pd.DataFrame(rows), pd.DataFrame(reference)


def biased_tags_table(tags: dict[str, list[str]]) -> pd.DataFrame:
    rows = [
        {"class": name, "tag": tag, "support": 200 - 12 * rank, "class_n": 300, "others_with_tag": 10 + rank,
         "log_odds": 4.0, "log_odds_ci_low": 3.1, "log_odds_ci_high": 4.9, "association_q": 1e-9,
         "within_auc": 0.8, "cross_auc": 0.9, "cross_n_with": 40, "cross_n_without": 500, "reliance_q": 2e-4, "score": 0.6 - 0.05 * rank,
         "biased": True, "rank": rank + 1, "rule": "shortcut"}
        for name, names in tags.items() for rank, tag in enumerate(names)
    ]
    return pd.DataFrame(rows)


def training_logits(rng: np.random.Generator, classes: list[str], biased: pd.DataFrame) -> pd.DataFrame:
    """Training predictions of both models: ERM's true-class logit grows with bias, MAVias' stays flat (paper)."""
    n = 600
    labels = rng.integers(0, len(classes), n)
    tag_lists = [list(rng.choice(TAGS[classes[y]], size=rng.integers(0, 5), replace=False)) for y in labels]
    strength = bias_alignment(pd.Series([classes[y] for y in labels]), pd.Series(tag_lists), biased)
    level = strength.cat.codes.to_numpy()
    frames = []
    for model, slope, base in (("ERM reference", 1.0, 4.0), ("MAVias", -0.15, 3.0)):
        logits = rng.normal(0, 0.8, (n, len(classes)))
        logits[np.arange(n), labels] = base + slope * level + rng.normal(0, 0.6, n)
        pred = pd.DataFrame(logits, columns=[f"logit_{k}" for k in range(len(classes))]).assign(label=labels)
        frames.append(logit_summary(pred, strength, model=model))
    return pd.concat(frames, ignore_index=True)


def history(rng: np.random.Generator, tags: dict[str, list[str]], nights: int) -> list[HistoryEntry]:
    start = date(2025, 6, 1)
    previous_tags = {name: names[1:11] for name, names in tags.items()}  # tonight's top tag of each class is new
    return [
        HistoryEntry(date=start + timedelta(days=i), run_id=f"scheduled__{start + timedelta(days=i)}", version=f"v{i}",
                     worst_group_accuracy=0.6 + 0.01 * i + rng.normal(0, 0.01), worst_group_ci_low=0.55 + 0.01 * i,
                     worst_group_ci_high=0.68 + 0.01 * i, average_accuracy=0.85 + 0.003 * i,
                     biased_tags=previous_tags, promoted=i % 3 != 1, audit_rule=RULE_VERSION)
        for i in range(nights)
    ]


@functools.cache
def validations() -> dict[str, dict]:
    """Two partitions validated by the real step: one passing with two undecodable images among 100, one with an
    unknown class."""
    known = sorted(TAGS)
    with tempfile.TemporaryDirectory() as tmp:
        passing = write_local_partition(Path(tmp) / "2025-06-14", ["dog"] * 100, corrupt=2)
        failing = write_local_partition(Path(tmp) / "2025-06-15", ["dog", "cat", "cat"])
        return {
            "2025-06-14": validate_partition(passing, Path(tmp) / "2025-06-14", known).to_dict(),
            "2025-06-15": validate_partition(failing, Path(tmp) / "2025-06-15", known).to_dict(),
        }


def fake_context(*, classes: list[str] | None = None, promoted: bool = False, nights: int = 14,
                 tags: dict[str, list[str]] = TAGS) -> ReportContext:
    rng = np.random.default_rng(0)
    classes = classes or sorted(tags)
    candidate_groups, reference_groups = group_tables(rng, classes)
    biased = biased_tags_table({name: tags[name] for name in classes})
    candidate, production = evaluation(0.68, (0.6, 0.71)), evaluation(0.74, (0.70, 0.78))
    gates = evaluate_gates(candidate, evaluation(0.55), production, CONFIG)
    run_id = "scheduled__2025-06-15T02:00:00+00:00"
    tonight = history_entry(night=date(2025, 6, 15), run_id=run_id, version="20250615T0200", evaluation=candidate,
                            wg_source="open_set", biased_tags=biased, promoted=promoted,
                            audit_rule=RULE_VERSION)
    return ReportContext(
        model_name="imagenet9", version="20250615T0200", run_id=run_id,
        created=datetime(2025, 6, 15, 3, 41, tzinfo=UTC), promoted=promoted, production_version="20250613T0200",
        model_uri="s3://mavias-models/models/imagenet9/20250615T0200/", gates=gates, validations=validations(),
        candidate_groups=candidate_groups, reference_groups=reference_groups, biased_tags=biased,
        logit_summary=training_logits(rng, classes, biased), history=[*history(rng, tags, nights), tonight],
        discovery=DiscoveryCounts(images_tagged=1840, llm_requests=37, encodings=212),
        verification=VerificationResult(3.1e-6, True, 256, ["CPUExecutionProvider"], 1e-4),
        onnx_sha256="9f2c" * 16,
        latency={"threads": 2, "image_size": 64, "goal_ratio": 0.7, "results": [
            {"batch": 1, "torch_eager_ms": 1.02, "onnx_ms": 0.32, "ratio": 0.31},
            {"batch": 32, "torch_eager_ms": 46.5, "onnx_ms": 24.7, "ratio": 0.53}]},
    )


# --- HTML checks -----------------------------------------------------------------------------------------------------
class _Structure(HTMLParser):
    """Checks that elements nest properly and collects tags, image sources and text."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: set[str] = set()
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in VOID_ELEMENTS:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> _Structure:
    structure = _Structure()
    structure.feed(html)
    structure.close()
    assert structure.stack == [], f"unclosed elements {structure.stack}"
    return structure


@pytest.fixture(scope="module")
def context() -> ReportContext:
    return fake_context()


def test_report_has_every_section_and_embedded_plots(context):
    html = render_report(context)
    page = parse(html)
    text = " ".join(page.text)
    assert not {"script", "style"} & page.tags
    assert "<style" not in html and "javascript:" not in html
    for gate in context.gates.results:
        assert gate.name in text
    for group in context.candidate_groups["group"]:
        assert group in text
    for name in ("Quality gates", "Data validation", "Accuracy per group", "Shortcuts found per class",
                 "Main-model logits: bias-aligned vs bias-conflicting", "Trend across nights", "Shortcut drift",
                 "ONNX export",
                 "images tagged", "2025-06-15", "labels_known_classes", "cannot decode: UnidentifiedImageError"):
        assert name in text
    assert len(page.images) == 2
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)


def test_failed_gate_explains_itself_in_the_headline(context):
    head = headline(context)
    assert head.tone != "passed" and "production stays 20250613T0200" in head.title
    assert any(r.startswith("No regression vs production (max_regression_vs_production): 71.0%") for r in head.reasons)
    assert "partition 2025-06-15: validation failed: labels_known_classes (unknown classes: cat)" in head.reasons
    assert len(head.next_steps) == len(context.gates.failed) + 1
    text = render_text(context)
    assert "[FAILED ]" in text and "[SKIPPED]" in text and context.model_uri in text


def test_an_audit_is_headed_as_passed_when_its_gates_pass_and_as_blocked_when_one_fails():
    failing = fake_context().model_copy(update={"audit": True})
    passing = failing.model_copy(update={"gates": GateReport(CONFIG, [])})
    assert failing.gates.failed and headline(failing).tone == "blocked"
    assert headline(passing).tone == "passed" and headline(passing).title.endswith("every checked gate passed")


def test_promoted_headline_mentions_rollback():
    night = fake_context(promoted=True)
    head = headline(night)
    assert head.tone == "passed" and "rollback" in head.next_steps[0]
    assert head.reasons[0] == "Promoted although gate(s) failed: max_regression_vs_production."
    passing = evaluate_gates(evaluation(0.8), evaluation(0.6), None, CONFIG)
    assert headline(night.model_copy(update={"gates": passing})).reasons[0] == (
        "All 4 checked gates passed (skipped: max_abs_bg_gap, max_abs_coobj_gap, max_abs_both_gap, "
        "max_regression_vs_production)."
    )


def test_email_variant_references_its_images_by_content_id(context):
    email = render_email(context)
    page = parse(email.html)
    assert sorted(src.removeprefix("cid:") for src in page.images) == sorted(email.images)
    assert all(png.startswith(PNG_MAGIC) for png in email.images.values())
    assert "data:image" not in email.html
    assert "NOT promoted" in email.subject and "imagenet9" in email.subject


def test_write_report_saves_html_and_plots(tmp_path):
    path = write_report(tmp_path, fake_context(nights=0))
    assert path == tmp_path / "report.html"
    assert all((tmp_path / name).read_bytes().startswith(PNG_MAGIC) for name in (LOGIT_PLOT, TREND_PLOT))
    html = path.read_text()
    assert "First night on record" in html and html.count("data:image/png;base64,") == 2


def test_missing_plot_data_is_said_not_hidden(tmp_path):
    bare = fake_context().model_copy(update={"logit_summary": None, "history": [], "verification": None})
    write_report(tmp_path, bare)
    html = (tmp_path / "report.html").read_text()
    assert html.count("Not available for this run.") == 2 and "was not exported tonight" in html
    assert not (tmp_path / LOGIT_PLOT).exists() and not (tmp_path / TREND_PLOT).exists()


def test_a_night_without_candidate_still_reports():
    night = fake_context()
    empty = night.model_copy(update={
        "gates": GateReport(CONFIG, []), "candidate_groups": night.candidate_groups.iloc[:0],
        "reference_groups": night.reference_groups.iloc[:0], "biased_tags": night.biased_tags.iloc[:0],
        "logit_summary": None, "verification": None, "latency": None, "validations": {}, "history": night.history[:-1],
        "notes": ["no new partitions tonight: nothing to train"],
    })
    text = " ".join(parse(render_report(empty)).text)
    for line in ("no new partitions tonight", "no gate ran", "No per-group results", "No candidate tonight",
                 "Nothing to do."):
        assert line in text
    assert "registry promote" not in text


def test_history_append_is_idempotent_per_run(tmp_path):
    path = tmp_path / "history.json"
    nights = history(np.random.default_rng(0), TAGS, 2)
    assert load_history(path) == []
    append_history(path, nights[1])
    append_history(path, nights[0])
    retried = nights[1].model_copy(update={"worst_group_accuracy": 0.9})
    assert append_history(path, retried) == [nights[0], retried]
    assert load_history(path) == [nights[0], retried]


def test_bias_drift_lists_new_and_gone_tags():
    current = biased_tags_by_class(biased_tags_table({"dog": ["couch", "bed", "grass"], "cat": ["sofa"]}))
    assert current == {"cat": ["sofa"], "dog": ["couch", "bed", "grass"]}
    drift = bias_drift({"dog": ["couch", "carpet"], "bird": ["sky"]}, current)
    assert drift.to_dict("records") == [
        {"class": "bird", "new": [], "gone": ["sky"]},
        {"class": "cat", "new": ["sofa"], "gone": []},
        {"class": "dog", "new": ["bed", "grass"], "gone": ["carpet"]},
    ]


def test_a_shortcut_relied_on_within_its_class_only_asks_for_a_look_at_its_relevance(context):
    biased = context.biased_tags.copy()
    first = biased.index[1]  # a class's second shortcut: not new tonight
    biased.loc[first, "cross_auc"] = 0.45  # 40 other-class images with the tag show no pull towards the class
    confined = context.model_copy(update={"biased_tags": biased})
    marker = "within the class only"
    html = " ".join(parse(render_report(context, {})).text)
    assert marker not in render_text(context) and html.count(marker) == 1  # the rule's own explanation
    text, html = render_text(confined), " ".join(parse(render_report(confined, {})).text)
    assert html.count(marker) == 2 and text.count(marker) == 2  # the marked shortcut, and what it means
    assert f"{biased.loc[first, 'tag']} ({marker})" in text and "check its relevance decision" in text


@pytest.mark.parametrize("drop", [True, False])
def test_shortcut_tables_without_the_cross_counts_or_read_back_as_text_mark_nothing(context, drop):
    biased = context.biased_tags.astype(str)  # as read back from CSV with keep_default_na=False
    biased = biased.drop(columns=["cross_n_with", "cross_n_without"]) if drop else biased.assign(cross_auc="")
    text = render_text(context.model_copy(update={"biased_tags": biased}))
    assert "within the class only" not in text and "Shortcuts found" in text


@pytest.mark.parametrize("before", [None, RULE_VERSION - 1])
def test_drift_across_a_change_of_the_audit_rule_says_so(context, before):
    note = "The shortcut rule (B') changed since 2025-06-14"
    assert note not in render_text(context) and note not in unescape(render_report(context, {}))
    previous = context.history[-2].model_copy(update={"audit_rule": before})
    upgraded = context.model_copy(update={"history": [*context.history[:-2], previous, context.history[-1]]})
    text, html = render_text(upgraded), " ".join(parse(render_report(upgraded, {})).text)
    assert note in text and note in html
    assert ("an earlier version" if before is None else f"version {before}") in text
    assert f"tonight version {RULE_VERSION}" in text


def test_logit_summary_of_aligned_and_conflicting_samples():
    biased = biased_tags_table({"dog": ["couch", "bed"], "bird": ["sky"]})
    labels = pd.Series(["dog", "dog", "dog", "bird"])
    kinds = bias_alignment(labels, pd.Series([["couch", "bed", "sky"], [], ["grass"], None]), biased)
    assert list(kinds) == ["bias-aligned", "bias-conflicting", "bias-conflicting", "bias-conflicting"]
    pred = pd.DataFrame({"label": [1, 1, 1, 0], "logit_0": [0.0, 1.0, 0.0, 3.0], "logit_1": [6.0, 2.0, 4.0, 0.0]})
    summary = logit_summary(pred, kinds, model="ERM reference")
    assert summary["bias_strength"].astype(str).tolist() == ["bias-conflicting", "bias-aligned"]  # conflicting first
    assert summary["mean"].tolist() == [3.0, 6.0] and summary["n"].tolist() == [3, 1]
    norms = logit_summary(pred, kinds, model="MAVias", statistic="norm")
    assert norms["mean"].iloc[1] == pytest.approx(6.0)


def test_settings_search_lists_trials_and_marks_the_chosen_one(context):
    chosen = {"mavias.alpha": 0.01, "mavias.lam": 0.5, "mavias.projection_lr_mult": 1.0, "optim.lr": 0.05, "epochs": 12}
    other = {"mavias.alpha": 0.03, "mavias.lam": 0.42, "mavias.projection_lr_mult": 4.2, "optim.lr": 0.02, "epochs": 9}
    tuning = {"chosen": chosen, "value": 0.71, "fallback": None, "trials": [
        {"number": 0, "value": 0.71, "state": "COMPLETE", "params": chosen},
        {"number": 1, "value": 0.64, "state": "COMPLETE", "params": other}]}
    text = " ".join(parse(render_report(context.model_copy(update={"tuning": tuning}))).text)
    assert "MAVias settings search" in text and "0 (chosen)" in text and "1 (chosen)" not in text
    assert "0.710" in text and "0.640" in text and "4.2" in text
    assert "MAVias settings search" not in " ".join(parse(render_report(context)).text)


def _relevance_changes(**classes: ClassChanges) -> RelevanceChanges:
    return RelevanceChanges(night="20250615T020000", previous_night="20250614T020000",
                            relevance="/ws/nights/20250615T020000/relevance.parquet", classes=classes)


def visible_text(html: str) -> str:
    parse(html)
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


def cell_text(html: str) -> str:
    """The visible text with every element boundary as a space (table cells stay apart)."""
    parse(html)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_changed_relevance_decisions_are_listed_per_class_capped_with_the_review_command(context):
    many = [f"tag{i:03d}" for i in range(300)]
    changes = _relevance_changes(
        dog=ClassChanges([], [], ["paw"], many),  # only new tags
        bird=ClassChanges(["beak"], ["perch", "twig"], [], []),  # flipped decisions: listed first
    )
    text = visible_text(render_report(context.model_copy(update={"relevance_changes": changes}), {}))
    section = text[text.index("Relevance decisions changed"):]
    assert section.index("bird") < section.index("dog")
    assert "beak" in section and "2: perch, twig" in section and "1 relevant (paw), 300 irrelevant" in section
    assert f"… and {300 - CHANGED_TAGS_SHOWN} more" in section and "tag299" not in section
    assert "mavias judge export-review /ws/nights/20250615T020000/relevance.parquet --out review.yaml" in section
    reviewed = changes.model_copy(update={"review": "/etc/mavias/review.yaml"})
    plain = render_text(context.model_copy(update={"relevance_changes": reviewed}))
    assert "Relevance decisions changed since night 20250614T020000 (2 class(es))" in plain
    assert "bird: became relevant: beak; became irrelevant: perch, twig" in plain
    assert "edit /etc/mavias/review.yaml" in plain and "tag299" not in plain

    crowded = _relevance_changes(**{f"class{i:02d}": ClassChanges([], [], ["new"], []) for i in range(40)})
    text = visible_text(render_report(context.model_copy(update={"relevance_changes": crowded}), {}))
    assert "class24" in text and "class25" not in text and "… and 15 more classes" in text


@pytest.mark.parametrize(("changes", "line"), [
    (None, "Nothing was judged tonight"),
    (_relevance_changes().model_copy(update={"previous_night": None}), "First night with a relevance table"),
    (_relevance_changes(), "No relevance decision changed and no tag is new since night 20250614T020000"),
])
def test_relevance_section_says_why_it_has_nothing_to_list(context, changes, line):
    night = context.model_copy(update={"relevance_changes": changes})
    assert line in visible_text(render_report(night, {}))
    assert "Relevance decisions changed since" not in render_text(night)


def test_an_audit_without_shortcuts_says_where_the_reason_is_not_that_nothing_was_looked_for():
    night = fake_context(nights=1)
    context = night.model_copy(update={"audit": True, "biased_tags": night.biased_tags.iloc[:0], "shortcut_status": None,
                                       "history": night.history[-1:], "trust": ["Tags: the data's own tags; unknown"]})
    text = " ".join(" ".join(parse(render_report(context, {})).text).split())
    assert "No class has a shortcut (B' is empty): the notes at the top" in text
    assert "No candidate tonight" not in text and "Tags: the data's own tags; unknown" in text


def test_the_group_table_names_the_split_it_was_measured_on():
    night = fake_context()
    assert "Test split, open-set groups" in visible_text(render_report(night, {}))
    named = night.model_copy(update={"evaluation_split": "mixed_rand"})  # ImageNet-9 has no test split
    assert "The mixed_rand split, open-set groups" in visible_text(render_report(named, {}))
