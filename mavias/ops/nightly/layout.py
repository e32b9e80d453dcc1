"""The workspace of the nightly flow: where each stage keeps its heavy artifacts, and the names that become paths.

A night is identified by its logical date, so a rerun of the same night finds the same folders. Every name that
becomes a path (partition, version, model) is checked against one pattern first
(:func:`~mavias.storage.names.check_name`), so nothing is read or written outside the workspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.client import BaseClient

from mavias.errors import UserError
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.incoming import MANIFEST_NAMES, MissingManifest
from mavias.ops.nightly.pull import pull_partition
from mavias.ops.registry import ModelRegistry
from mavias.ops.reporting.mail import Outbox
from mavias.storage.names import check_name
from mavias.storage.s3 import make_s3_client, retry_transient, s3_uri

if TYPE_CHECKING:  # both import torch: imported where used, since the DAG file imports this module at every parse
    from mavias.core.discovery import Workspace
    from mavias.core.train.decoded import DecodedStore

NIGHT_FORMAT = "%Y%m%dT%H%M%S"
REPORTS_DIR = "report"  # nights/<night>/report/attempt-<n>/
CHECKPOINT_NAME = "model.pt"  # the main model's checkpoint in a version folder
DECODED_KEYS_NAME = "decoded.json"  # the decoded/<key>/ folders a dataset reads (retention keeps them)


@dataclass(frozen=True)
class Layout:
    root: Path

    def partition(self, name: str) -> Path:
        return self.root / "partitions" / check_name("partition", name)

    def revalidation(self, name: str) -> Path:
        """Where a validated partition forced to validate again is pulled, so a failure leaves the validated copy."""
        return self.root / "revalidation" / check_name("partition", name)

    def evaluation(self, version: str) -> Path:
        return self.root / "evaluation" / check_name("evaluation version", version)

    @property
    def discovery(self) -> Workspace:
        from mavias.core.discovery import Workspace

        return Workspace(self.root / "discovery")

    @property
    def decoded(self) -> DecodedStore:
        """Decoded images, one file per partition (or evaluation version) and transform: decoded once."""
        from mavias.core.train.decoded import DecodedStore

        return DecodedStore(self.root / "decoded", self.root, depth=2)

    def training(self, digest: str) -> Path:
        return self.root / "training" / digest

    def production(self, version: str) -> Path:
        return self.root / "production" / check_name("version", version)

    @property
    def nights(self) -> Path:
        return self.root / "nights"

    def night(self, night: str) -> Path:
        return self.nights / check_name("night", night)

    def night_reports(self, night: str) -> Path:
        """The night's report attempts (``attempt-<n>/``)."""
        return self.night(night) / REPORTS_DIR

    @property
    def outbox(self) -> Outbox:
        return Outbox(self.root / "outbox")

    @property
    def history(self) -> Path:
        return self.root / "history.json"


def layout(cfg: NightlyConfig) -> Layout:
    return Layout(cfg.workspace)


def night_id(when: datetime) -> str:
    return when.strftime(NIGHT_FORMAT)


def evaluation_partition(cfg: NightlyConfig) -> str:
    """Discovery name of the evaluation set: it is tagged, judged and encoded like a partition, once per version.
    It starts with '_', which no incoming partition's name can (:func:`~mavias.storage.names.check_name`), so a
    partition named "evaluation-v1" never shares its folders."""
    return f"_evaluation-{cfg.evaluation.version}"


def s3_client(cfg: NightlyConfig, step: str, deadline_s: float | None = None) -> BaseClient:
    """The S3 client of one step: every request and retry of the step together waits on the store at most
    ``deadline_s`` (default ``s3.step_deadline_s``), then stops with a message naming the step."""
    return make_s3_client(cfg.s3, deadline_s=deadline_s or cfg.s3.step_deadline_s, step=step)


def registry(cfg: NightlyConfig, client: BaseClient | None = None, step: str = "registry") -> ModelRegistry:
    return ModelRegistry(client or s3_client(cfg, step), cfg.s3, cfg.model_name)


def reports_prefix(cfg: NightlyConfig) -> str:
    """Bucket folder of the night reports and the history, next to the model's versions."""
    return f"{cfg.s3.models_prefix}{cfg.model_name}/reports/"


def pull(cfg: NightlyConfig, client: BaseClient, partition: str, *, pinned: bool = True,
         into: Path | None = None) -> Path:
    """:func:`pull_partition` into the workspace (at its validated ETags unless ``pinned`` is False; into its
    partition folder unless ``into``), retried while the bucket is unreachable."""
    return retry_transient(cfg.s3)(pull_partition, client, cfg.s3, partition,
                                   into or layout(cfg).partition(partition), pinned=pinned)


class EvaluationSetMissing(UserError):
    """The configured evaluation set has no manifest in the bucket."""


def pull_evaluation_set(cfg: NightlyConfig, client: BaseClient) -> Path:
    """The fixed evaluation set ``s3://<bucket>/<prefix><version>/`` (pulled like a partition, by ETag)."""
    settings = cfg.s3.model_copy(update={"incoming_prefix": cfg.evaluation.prefix})
    local = layout(cfg).evaluation(cfg.evaluation.version)
    try:
        return retry_transient(cfg.s3)(pull_partition, client, settings, cfg.evaluation.version, local)
    except MissingManifest:
        where = s3_uri(cfg.s3, f"{cfg.evaluation.prefix}{cfg.evaluation.version}/")
        raise EvaluationSetMissing(
            f"evaluation set {cfg.evaluation.version!r} is missing: {where} has no {' or '.join(MANIFEST_NAMES)}. "
            f"Upload the fixed evaluation set there (its images first, the manifest last, e.g. `aws s3 sync "
            f"EVALUATION_DIR {where}`), or set evaluation.version in the nightly config (or "
            "MAVIAS_NIGHTLY__EVALUATION__VERSION) to a version that exists"
        ) from None
