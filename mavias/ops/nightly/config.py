"""Configuration of the nightly pipeline: one YAML file plus environment overrides, validated at load.

Sources, later ones win:

1. ``nightly_default.yaml`` shipped with the package, or the file named by ``path`` / ``$MAVIAS_NIGHTLY_CONFIG``;
2. ``MAVIAS_NIGHTLY__<SECTION>__<KEY>=<YAML value>`` for any field (e.g. ``MAVIAS_NIGHTLY__EVALUATION__VERSION=v2``,
   ``MAVIAS_NIGHTLY__REPORT__RECIPIENTS='[ops@example.com]'``);
3. ``MAVIAS_S3_<FIELD>`` for the S3 settings (as in :func:`mavias.storage.s3.load_settings`);
4. with ``discovery.judge: llm``, the LLM's endpoint, model and key from ``$MAVIAS_LLM_BASE_URL``,
   ``$MAVIAS_LLM_MODEL`` and ``$MAVIAS_LLM_API_KEY``, or the Airflow connection ``airflow.llm_conn_id`` (never the
   file; docs/llm-judge.md).

Relative paths are relative to the YAML file's folder. Credentials never belong in the file (one that holds them
is refused): they come from ``MAVIAS_S3_ACCESS_KEY_ID`` / ``MAVIAS_S3_SECRET_ACCESS_KEY``, the Airflow connection
or the standard AWS chain (environment, profile, instance role).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from mavias.core.judging.factory import JudgeSettings
from mavias.core.train.config import TrainConfig, load_config
from mavias.errors import UserError, describe_validation_error
from mavias.ops.gates import DEFAULT_GATES_PATH
from mavias.ops.registry.kubernetes import InferenceServiceRef
from mavias.ops.validation import ValidationSettings
from mavias.storage.names import check_name
from mavias.storage.s3 import ENV_PREFIX as S3_ENV_PREFIX
from mavias.storage.s3 import S3Settings, environment_settings, folder_prefix
from mavias.utils.mappings import read_yaml_mapping, set_nested

DEFAULT_CONFIG_PATH = Path(__file__).with_name("nightly_default.yaml")
CONFIG_ENV = "MAVIAS_NIGHTLY_CONFIG"
OVERRIDE_PREFIX = "MAVIAS_NIGHTLY__"
PATH_FIELDS = (("workspace",), ("gates",), ("train", "config"), ("discovery", "review"))
TAGGERS = ("manifest", "openclip")
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
CREDENTIAL_FIELDS = ("access_key_id", "secret_access_key", "session_token")


class NightlyConfigError(UserError, ValueError):
    """The nightly configuration is missing or invalid; the message says which file and field."""


class _Section(BaseModel):
    # Errors must not echo inputs: an override may sit next to a credential.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class TrainSection(_Section):
    preset: str | None = Field(None, description="a preset of mavias/core/train/presets")
    config: Path | None = Field(None, description="a TrainConfig YAML, merged over the preset")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys, merged last")
    tune_trials: int = Field(
        1, ge=1, description="MAVias settings tried per night, one mapped GPU task each; 1: exactly the configured "
        "settings; more: the previous night's best first, then Optuna's TPE picks; the val criterion picks one",
    )
    nproc: int = Field(
        1, ge=1, description="processes of each training task, data-parallel (DDP via torch.distributed.run): one "
        "per GPU of a GPU worker (airflow.gpus_per_task), or CPU processes with gloo",
    )
    warm_start: bool = Field(
        True, description="a night that adds images to the promoted model's classes trains its reference and "
        "MAVias from the promoted night's, for the new images' share of the steps plus warm_replay of the old ones "
        "(mavias/ops/nightly/warm.py says when it trains from scratch instead; BENCHMARKS.md, \"Warm nights\")",
    )
    warm_replay: float = Field(0.25, ge=0.0, le=1.0, description="share of the old images' steps a warm night "
                               "replays, on top of the new images'")
    full_retrain_every: int = Field(4, ge=1, description="every Nth night in a row of one lineage trains from "
                                    "scratch (1: always)")


class DiscoverySection(_Section):
    tagger: str = Field(
        "manifest",
        description="manifest (the manifest's own tags), openclip, or 'package.module:factory' returning a Tagger",
    )
    judge: Literal["offline", "llm"] = Field(
        "offline", description="the relevance judge: offline (WordNet and MiniLM) or llm (an OpenAI-compatible "
        "endpoint from the Airflow connection airflow.llm_conn_id, else $MAVIAS_LLM_BASE_URL, $MAVIAS_LLM_MODEL, "
        "$MAVIAS_LLM_API_KEY; docs/llm-judge.md). When the LLM fails or its budget is spent, the offline judge "
        "decides the night's new pairs and the report says so",
    )
    llm_requests_per_night: int = Field(500, ge=1, description="the most LLM requests a night sends (retries "
                                        "included); then the offline judge decides what is left")
    llm_deadline_minutes: float = Field(30.0, gt=0, description="the LLM judge's time within a discover attempt; "
                                        "then the offline judge decides what is left")
    num_shards: int = Field(4, ge=1, description="tagging shards per partition, one mapped task each")
    batch_size: int = Field(32, ge=1, description="images per tagging batch")
    weights_dir: Path | None = Field(None, description="folder of the OpenCLIP weights (Hugging Face cache layout or "
                                     "~/.cache/clip files) that every worker mounts, for the openclip tagger and an "
                                     "openclip: encoder; null: the default caches. Nothing is downloaded; the "
                                     "preflight checks they are there")
    review: Path | None = Field(
        None, description="reviewed decisions (YAML, `mavias judge export-review`) that override the judge's"
    )

    @field_validator("tagger")
    @classmethod
    def _known_tagger(cls, value: str) -> str:
        if value not in TAGGERS and not IMPORT_PATH.match(value):
            raise ValueError(f"tagger must be one of {TAGGERS} or an import path 'package.module:factory'")
        return value


class EvaluationSection(_Section):
    prefix: str = Field("evaluation/", description="bucket folder of the versioned evaluation sets")
    version: str = Field("v1", description="s3://<bucket>/<prefix><version>/manifest.{parquet,csv}")
    closed_set_attrs: list[str] = Field(default_factory=list, description="attr_* columns for closed-set metrics")
    n_boot: int = Field(1000, ge=0, description="bootstrap resamples of the worst-group confidence interval")

    @field_validator("prefix")
    @classmethod
    def _folder(cls, value: str) -> str:
        return folder_prefix(value)

    @field_validator("version")
    @classmethod
    def _safe_version(cls, value: str) -> str:
        return check_name("evaluation version", value)


class ReportSection(_Section):
    recipients: list[str] = Field(default_factory=list, description="empty: the report is saved, not mailed")
    latency_runs: int = Field(10, ge=1, description="timed runs per batch size of the ONNX latency check")
    storage_deadline_s: float = Field(
        60.0, gt=0, description="the most the report step waits on the bucket in all; past it the report is made and "
        "sent from local state and uploaded by a later night",
    )


class ServingSection(_Section):
    inference_service: InferenceServiceRef | None = Field(
        None, description="{namespace, name, container}: after each promotion, point this KServe InferenceService's "
        "STORAGE_URI at the promoted version (null: serving follows the registry itself, `mavias serve --registry`)",
    )
    retry_s: float = Field(120.0, ge=0, description="how long an unreachable or conflicting Kubernetes API is retried")


class RetentionSection(_Section):
    keep_datasets: int = Field(3, ge=1, description="prepared datasets and their trainings (training/<digest>/) kept "
                               "besides production's and tonight's, those used last; the others are deleted each night")
    keep_nights: int = Field(90, ge=1, description="night folders (nights/<night>/: validation, relevance, packages) "
                             "kept, newest first, besides production's night and nights whose report is not uploaded yet; the report "
                             "history is kept whole")


class AirflowSection(_Section):
    """Read by the DAG and the plugin only; the library never imports Airflow."""

    schedule: str | None = Field("@daily", description="the DAG's schedule (cron or preset); null: triggered only")
    start_date: date = Field(date(2025, 1, 1), description="the first night the schedule covers")
    retries: int = Field(2, ge=0, description="retries of a failed task")
    retry_delay_s: float = Field(60.0, ge=0, description="the first retry's delay, doubled each time")
    max_retry_delay_s: float = Field(900.0, ge=0, description="the longest delay between retries")
    gpu_pool: str = Field("gpu", description="Airflow pool that bounds concurrent GPU tasks")
    gpu_queue: str = Field("gpu", description="Celery queue of the GPU workers")
    gpus_per_task: int = Field(1, ge=1, description="nvidia.com/gpu limit of a GPU task's pod (KubernetesExecutor)")
    aws_conn_id: str = Field("aws_default", description="Airflow connection of the S3 credentials")
    smtp_conn_id: str = Field("smtp_default", description="Airflow connection of the report's SMTP server")
    api_conn_id: str = Field("airflow_api", description="Airflow's REST API, for the preflight pool check")
    llm_conn_id: str = Field("mavias_llm", description="Airflow connection of the LLM judge (discovery.judge: llm): "
                             "host = base URL, password = key, extra = model, timeout, samples (docs/llm-judge.md)")
    dagrun_timeout_h: float = Field(20.0, gt=0, description="a night still running after this fails (Airflow skips "
                                    "its report; the next night's report names it)")
    task_timeout_min: float = Field(60.0, gt=0, description="execution_timeout of every task but the GPU ones")
    gpu_task_timeout_min: float = Field(360.0, gt=0, description="execution_timeout of tagging and training")


class NightlyConfig(_Section):
    model_name: str = Field(description="the model's name in the registry (models/<name>/...)")
    s3: S3Settings
    workspace: Path = Field(description="local (or shared-volume) folder of every heavy artifact")
    classes: list[str] | None = Field(None, description="known classes; default: the evaluation set's labels")
    train: TrainSection = TrainSection()
    discovery: DiscoverySection = DiscoverySection()
    evaluation: EvaluationSection = EvaluationSection()
    validation: ValidationSettings = ValidationSettings()
    gates: Path = Field(DEFAULT_GATES_PATH, description="the quality gates' YAML (worst-group floors, regressions)")
    report: ReportSection = ReportSection()
    serving: ServingSection = ServingSection()
    retention: RetentionSection = RetentionSection()
    airflow: AirflowSection = AirflowSection()

    _training: TrainConfig = PrivateAttr()
    _llm: JudgeSettings = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._training = load_config(self.train.config, preset=self.train.preset, overrides=self.train.overrides)
        self._llm = JudgeSettings.llm_from_environment()

    def judge_settings(self) -> JudgeSettings:
        """The relevance judge of ``discovery.judge``, with the LLM's endpoint and key where it is an LLM."""
        return self._llm if self.discovery.judge == "llm" else JudgeSettings()

    def with_llm(self, settings: JudgeSettings) -> NightlyConfig:
        """This config with the LLM judge's endpoint, model and key (from the Airflow connection)."""
        copy = self.model_copy()
        copy._llm = settings
        return copy

    @property
    def training(self) -> TrainConfig:
        """The training config the ``train`` section names (preset < file < overrides), loaded once with the rest."""
        return self._training

    @field_validator("model_name")
    @classmethod
    def _safe_model_name(cls, value: str) -> str:
        return check_name("model name", value)


def _apply_environment(data: dict, environ: Mapping[str, str]) -> dict:
    for name, raw in sorted(environ.items()):
        if name.startswith(OVERRIDE_PREFIX):
            data = set_nested(data, name[len(OVERRIDE_PREFIX) :].lower().split("__"), yaml.safe_load(raw))
    return data | {"s3": dict(data.get("s3") or {}) | environment_settings(environ)}


def _absolute_paths(data: dict, base: Path) -> dict:
    for keys in PATH_FIELDS:
        node = data
        for key in keys[:-1]:
            node = node.get(key) or {}
        value = node.get(keys[-1])
        if value is not None:
            path = Path(str(value)).expanduser()
            data = set_nested(data, keys, path if path.is_absolute() else base / path)
    return data


def config_path(path: str | Path | None = None, environ: Mapping[str, str] = os.environ) -> Path:
    return Path(path or environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def load_nightly_config(path: str | Path | None = None, environ: Mapping[str, str] = os.environ) -> NightlyConfig:
    """The validated configuration (see the module docstring for its sources)."""
    source = config_path(path, environ)
    if not source.is_file():
        raise NightlyConfigError(f"nightly config {source} does not exist (set ${CONFIG_ENV} or pass a path)")
    data = read_yaml_mapping(source, what="nightly config", error=NightlyConfigError)
    if found := [f"s3.{key}" for key in CREDENTIAL_FIELDS if key in (data.get("s3") or {})]:
        raise NightlyConfigError(
            f"nightly config {source} holds credentials ({', '.join(found)}): remove them from the file; set "
            f"{S3_ENV_PREFIX}ACCESS_KEY_ID and {S3_ENV_PREFIX}SECRET_ACCESS_KEY in the environment, or use the "
            "Airflow connection or the AWS credential chain"
        )
    data = _absolute_paths(_apply_environment(data, environ), source.parent)
    try:
        config = NightlyConfig.model_validate(data)
    except ValidationError as err:
        raise NightlyConfigError(describe_validation_error(err, what=f"nightly config {source}", model=NightlyConfig,
                                                           show_input=False),
                                 hint=f"fix it in {source} (or the environment variable that overrides it); "
                                      "docs/nightly-config.md lists every setting") from None
    except (ValueError, FileNotFoundError) as err:
        raise NightlyConfigError(f"invalid nightly config {source}: {err}") from None
    return config
