"""The report of a night that is not a plain gate verdict (a headline, subject and next step per cause), each class's
shortcuts with their evidence or why it has none, the two worst groups side by side, and the trend's dated axis."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mavias.ops.gates import GateReport
from mavias.ops.nightly.outcome import night_problem
from mavias.ops.reporting.plots import trend_figure
from mavias.ops.reporting.render import headline, render_email, render_report, render_text
from tests.ops.gates.test_gates import CONFIG
from tests.ops.reporting.test_report import TAGS, cell_text, context, fake_context, history, visible_text  # noqa: F401

# --- the night's problem: each cause its own headline, subject and next step ------------------------------------------
POINTER = "the production pointer s3://b/models/m/production.json is corrupt (history: Field required)"
PROBLEMS = {
    "preflight": ({"states": {"preflight": "failed", "sense": "upstream_failed"},
                   "failures": {"preflight": "the night cannot run: pool 'gpu' does not exist"}},
                  "FAILED: the night could not start (preflight check)", "clear the run", "failed"),
    "configuration": ({"states": {"sense": "failed"}, "user_error": True,
                       "failures": {"sense": "invalid force_partition '../x': use 1-128 letters"}},
                      "FAILED: a configuration or input mistake stopped sense", "was not retried", "failed"),
    "training": ({"states": {"train_reference": "failed", "tune_trial": "upstream_failed"}, "trained": True,
                  "failures": {"train_reference": "training erm in /ws failed in epoch 3: ValueError: Expected more "
                                                  "than 1 value per channel"}},
                 "FAILED: training failed (the ERM reference)", "resumes", "failed"),
    "a mapped trial": ({"states": {"train_reference": "success", "tune_trial_0": "success", "tune_trial_1": "failed",
                                   "train_mavias": "upstream_failed"}, "trained": True,
                        "failures": {"tune_trial": "training mavias in /ws failed in epoch 2: RuntimeError: boom"}},
                       "FAILED: training failed (a MAVias settings trial)", "resumes", "failed"),
    "corrupt pointer": ({"pointer": [POINTER], "trained": True}, "FAILED: the production pointer is corrupt",
                        "mavias registry repair --name imagenet9", "failed"),
    "same data": ({"dataset": {"same_as_production": "v7", "digest": "abc123"}, "trained": True},
                  "Skipped: tonight's data and settings are exactly production's (v7)", "full_retrain", "routine"),
    "rejected data": ({"validated": {"failed": ["p1"]}}, "Data rejected: 1 partition(s) failed validation",
                      "delete quarantine/p1/validation.json", "blocked"),
    "nothing new": ({}, "Nothing new tonight", "Nothing to do.", "routine"),
}


@pytest.mark.parametrize("cause", PROBLEMS)
def test_each_night_problem_has_its_own_headline_subject_and_next_step(cause):
    spec, title, step, tone = PROBLEMS[cause]
    failures = {task: {"task": task, "message": message, "user_error": spec.get("user_error", False), "at": ""}
                for task, message in spec.get("failures", {}).items()}
    results = {key: spec[key] for key in ("dataset", "validated") if key in spec}
    problem = night_problem("imagenet9", results, trained=spec.get("trained", False), decision="why not trained",
                            states=spec.get("states", {}), failures=failures, pointer_problems=spec.get("pointer", []))
    night = fake_context().model_copy(update={
        "problem": problem, "gates": GateReport(CONFIG, []), "validations": {}, "production_version": None})
    head = headline(night)
    assert head.title.startswith(title) and head.tone == tone
    assert any(step in s for s in head.next_steps), head.next_steps
    assert "no production model yet" not in head.title and "Not promoted" not in head.title
    for message in spec.get("failures", {}).values():
        assert any(message in reason for reason in head.reasons)
    subject = render_email(night).subject
    assert "NOT promoted" not in subject and problem.subject in subject
    assert subject.startswith("[mavias] imagenet9 ") and ("FAILED" in subject) is (tone == "failed")
    assert title in visible_text(render_report(night, {}))


def test_a_promotion_is_the_verdict_even_on_a_night_with_nothing_new():
    problem = night_problem("m", {}, trained=False, decision="no new partitions", states={}, failures={},
                            pointer_problems=[])
    night = fake_context(promoted=True).model_copy(update={"problem": problem})
    assert headline(night).tone == "passed" and render_email(night).subject.endswith(": promoted")


# --- shortcuts with their evidence, what changed, and why a class has none ----------------------------------------------
def _status(rows: dict[str, tuple[str, str, int]]) -> pd.DataFrame:
    return pd.DataFrame([{"class": name, "status": status, "reason": reason, "n_eval": n_eval}
                         for name, (status, reason, n_eval) in rows.items()])


def test_each_class_names_its_shortcuts_with_evidence_and_what_changed_since_last_night(context):
    tags = {"bird": TAGS["bird"], "dog": TAGS["dog"]}  # vehicle: none tonight
    night = fake_context(tags=tags, classes=["bird", "dog"]).model_copy(update={"shortcut_status": _status({
        "bird": ("shortcuts", "", 30), "dog": ("shortcuts", "", 30),
        "vehicle": ("too_few_samples", "too few samples: its most frequent irrelevant tag 'road' is on 12 training "
                                       "image(s), fewer than the 20 needed", 0)})})
    text = cell_text(render_report(night, {}))
    section = text[text.index("Shortcuts found per class"):text.index("Relevance decisions changed")]
    assert "perch new" in section and "branch new" not in section  # perch is tonight's new top shortcut
    assert "no longer: leaf" in section  # in last night's top 10, not tonight's
    assert "200 of 300 training images of the class (10 of the other classes')" in section
    assert "log odds 4.0 [3.1, 4.9], q 1e-09" in section
    assert "effect 0.60 (within-class AUC 0.80, other classes' AUC 0.90), q 0.0002" in section
    assert ("vehicle no image in the evaluation set: its groups are not measured No shortcut: too few samples: its "
            "most frequent irrelevant tag 'road' is on 12") in section
    plain = render_text(night)
    assert "Shortcuts found (B', per class):" in plain and "  bird: perch (new), branch" in plain
    assert "  vehicle: none (too few samples" in plain


def test_an_empty_shortcut_set_says_why_per_class(context):
    empty = context.biased_tags.iloc[:0]
    night = context.model_copy(update={"biased_tags": empty, "logit_summary": None, "shortcut_status": _status({
        "bird": ("not_relied_on", "the reference does not lean on its 3 associated tag(s)", 40),
        "dog": ("no_irrelevant_tags", "no training image carries a tag judged irrelevant to this class", 40),
        "vehicle": ("reference_too_weak", "reference too weak: it is 41% accurate on this class's validation images",
                    40)})})
    text = cell_text(render_report(night, {}))
    for line in ("bird No shortcut: the reference does not lean on its 3 associated tag(s)",
                 "dog No shortcut: no training image carries a tag judged irrelevant",
                 "vehicle No shortcut: reference too weak: it is 41% accurate",
                 "No shortcut was found tonight, so every training image is bias-conflicting"):
        assert line in text, line


def test_label_free_and_closed_set_worst_groups_side_by_side(context):
    rows = [{"protocol": "open-set (label-free: the reference's B')", "group": "bird|conflicting", "candidate": 0.71,
             "ci_low": 0.6, "ci_high": 0.8, "n": 40, "reference": 0.52},
            {"protocol": "closed-set (group attributes)", "group": "bird|0|1", "candidate": 0.69, "ci_low": 0.55,
             "ci_high": 0.8, "n": 20, "reference": 0.45}]
    text = cell_text(render_report(context.model_copy(update={"cross_check": rows}), {}))
    assert "open-set (label-free: the reference's B') (gates: open-set) bird|conflicting n=40 71.0% [60.0%, 80.0%] " \
           "52.0%" in text
    assert "closed-set (group attributes) bird|0|1 n=20 69.0%" in text and "is a cross-check" in text


def test_the_trend_axis_shows_one_date_per_night_never_hours():
    nights = history(np.random.default_rng(0), TAGS, 2)
    labels = [t.get_text() for t in trend_figure(nights).axes[0].get_xticklabels()]
    assert labels == ["2025-06-01", "2025-06-02"]
    many = [t.get_text() for t in trend_figure(history(np.random.default_rng(0), TAGS, 30)).axes[0].get_xticklabels()]
    assert len(many) == 30 and sum(bool(t) for t in many) <= 10 and many[0] == "2025-06-01"
