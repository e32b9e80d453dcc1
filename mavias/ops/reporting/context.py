"""What a nightly report shows (:class:`ReportContext`), filled by the nightly flow from the artifacts of the night."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.judging.quality import ClassChanges
from mavias.ops.export.verification import VerificationResult
from mavias.ops.gates import GateReport
from mavias.ops.reporting.examples import Example
from mavias.ops.reporting.history import HistoryEntry


class RelevanceChanges(BaseModel):
    """``nights/<night>/relevance_changes.json``: how tonight's relevance decisions differ from those of the previous
    night that recorded a relevance table (:func:`~mavias.core.judging.quality.decision_changes`)."""

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


class NightProblem(BaseModel):
    """What went wrong (or why nothing happened) on a night that is not a plain gate verdict or promotion: its own
    headline, reasons and next steps in the report and the email."""

    kind: str  # task_failed, corrupt_pointer, same_as_production, data_rejected, nothing_new
    severity: Literal["failed", "blocked", "routine"]  # failed: the run fails too; routine: nothing was wrong
    title: str
    subject: str  # the email subject's verdict
    reasons: list[str]
    next_steps: list[str]


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
    problem: NightProblem | None = None  # None: the gates' verdict or the promotion tells the night
    unsafe_folders: list[str] = []  # incoming folders ignored for their names
    gates: GateReport
    validations: dict[str, dict[str, Any]]  # partition -> ValidationResult.to_dict()
    candidate_groups: pd.DataFrame  # group table (evaluate_checkpoint "tables") of the gates' wg_source
    reference_groups: pd.DataFrame
    biased_tags: pd.DataFrame  # B' of the ERM reference (mavias.core.evaluate.shortcuts.SHORTCUT_COLUMNS)
    shortcut_status: pd.DataFrame | None = None  # per class: its shortcuts or why none (shortcut_status.STATUS_COLUMNS)
    cross_check: list[dict[str, Any]] = []  # worst group per protocol (open-set, closed-set): candidate vs reference
    logit_summary: pd.DataFrame | None = None  # logit_summary() rows of the ERM reference and of MAVias
    bias_strength_label: str = ("bias-conflicting: carries none of its class's shortcuts (B'); bias-aligned: carries "
                                "at least one")
    history: list[HistoryEntry] = []  # past nights and tonight's entry (append_history before rendering)
    discovery: DiscoveryCounts | None = None
    verification: VerificationResult | None = None
    onnx_sha256: str | None = None
    latency: dict[str, Any] | None = None  # export_latency_benchmark()
    tuning: dict[str, Any] | None = None  # mavias.ops.nightly.train.select_candidate()["tuning"]: trials and the chosen settings
    attempt: int = 1  # reports of one night are immutable: a rerun (cleared run) writes attempt 2, 3, ...
    original_outcome: str | None = None  # on a rerun: attempt 1's verdict (its email subject)
    relevance_changes: RelevanceChanges | None = None  # None: nothing was judged tonight
    min_support: int = MIN_SUPPORT  # groups under it are flagged small
    trust: list[str] = []  # how far the tags and decisions behind B' can be trusted (evaluate.explain.trust_lines)
    shortcut_examples: dict[str, dict[str, Example]] = {}  # class -> tag -> its example images (reporting.examples)
    decision_sources: pd.DataFrame | None = None  # per class: who decided relevance (nightly.report_context)
    candidate_method: str = "MAVias-PoE"  # the candidate's method by name (train.config.method_name)
    audit: bool = False  # a one-off audit of a data folder (`mavias audit`): nothing is promoted
    evaluation_split: str = "test"  # the split the groups were measured on (a dataset's named one when it has no test)
