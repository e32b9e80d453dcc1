"""Hooks: the nightly config with S3 credentials and the LLM judge from Airflow connections, its model registry,
SMTP settings.

S3 credentials come from the Airflow connection when it exists (an ``aws``-type connection: login = access key id,
password = secret access key, extra ``endpoint_url`` / ``region_name`` / ``aws_session_token``), otherwise from the
standard AWS chain (environment, profile, instance role). The LLM judge (``discovery.judge: llm``) comes from
``airflow.llm_conn_id`` when it exists (host = base URL, password = key, extra ``model``, ``timeout``, ``samples``,
``max_retries``, ``reasoning``, ``system_prompt_in_user``), otherwise from ``$MAVIAS_LLM_*``. Secrets travel as
``SecretStr`` and are never logged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowNotFoundException
from pydantic import SecretStr

from mavias.core.judging.factory import JudgeSettings
from mavias.errors import UserError
from mavias.ops.nightly.config import NightlyConfig, load_nightly_config
from mavias.ops.registry import ModelRegistry
from mavias.ops.reporting.mail import SmtpSettings
from mavias.storage.s3 import S3Settings, make_s3_client


def _optional_connection(conn_id: str) -> Connection | None:
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


def _secret(value: str | None) -> SecretStr | None:
    return SecretStr(value) if value else None


def s3_settings_from_connection(base: S3Settings, conn_id: str) -> S3Settings:
    """``base`` with the connection's endpoint, region and credentials; ``base`` alone when there is none."""
    conn = _optional_connection(conn_id)
    if conn is None:
        return base
    extra: dict[str, Any] = conn.extra_dejson
    update = {
        "endpoint_url": extra.get("endpoint_url") or base.endpoint_url,
        "region": extra.get("region_name") or base.region,
        "access_key_id": _secret(conn.login) or base.access_key_id,
        "secret_access_key": _secret(conn.password) or base.secret_access_key,
        "session_token": _secret(extra.get("aws_session_token")) or base.session_token,
    }
    return base.model_copy(update=update)


def _flag(value: Any) -> bool:
    """A boolean extra, also when a connection URI made it a string ("false" is false)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


LLM_EXTRAS = {"model": str, "timeout": float, "samples": int, "max_retries": int, "reasoning": _flag,
              "system_prompt_in_user": _flag}


def _base_url(conn: Connection) -> str | None:
    """The host as the base URL ("https://api.openai.com/v1"); a bare host gets the schema (https) and port."""
    if not conn.host or "://" in conn.host:
        return conn.host or None
    port = f":{conn.port}" if conn.port else ""
    return f"{conn.schema or 'https'}://{conn.host}{port}/v1"


def llm_settings_from_connection(base: JudgeSettings, conn_id: str) -> JudgeSettings:
    """``base`` with the connection's base URL, key and extras; ``base`` alone when there is no such connection."""
    conn = _optional_connection(conn_id)
    if conn is None:
        return base
    extra: dict[str, Any] = conn.extra_dejson
    unknown = sorted(set(extra) - set(LLM_EXTRAS))
    if unknown:
        raise UserError(f"connection {conn_id!r} has unknown extra field(s) {', '.join(unknown)}",
                        hint=f"use {', '.join(LLM_EXTRAS)}")
    try:
        extras = {name: LLM_EXTRAS[name](value) for name, value in extra.items()}
    except (TypeError, ValueError) as error:
        raise UserError(f"connection {conn_id!r}: an extra field has the wrong type ({error})",
                        hint="model is text, timeout a number, samples and max_retries whole numbers") from None
    return dataclasses.replace(base, base_url=_base_url(conn) or base.base_url,
                               api_key=_secret(conn.password) or base.api_key, **extras)


class MaviasHook(BaseHook):
    """The nightly configuration (YAML + environment) with S3 credentials resolved from ``aws_conn_id``; its client
    (``get_conn``) is the model registry of the configured model."""

    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "MAVias"

    def __init__(self, aws_conn_id: str | None = None, config_path: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id

    def get_config(self) -> NightlyConfig:
        cfg = load_nightly_config(self.config_path)
        conn_id = self.aws_conn_id or cfg.airflow.aws_conn_id
        cfg = cfg.model_copy(update={"s3": s3_settings_from_connection(cfg.s3, conn_id)})
        if cfg.discovery.judge == "llm":
            cfg = cfg.with_llm(llm_settings_from_connection(cfg.judge_settings(), cfg.airflow.llm_conn_id))
        return cfg

    def get_conn(self) -> ModelRegistry:
        """The model registry (versions, the production pointer, history) of the configured model."""
        cfg = self.get_config()
        return ModelRegistry(make_s3_client(cfg.s3), cfg.s3, cfg.model_name)


def smtp_settings_from_connection(conn_id: str) -> SmtpSettings | None:
    """An Airflow SMTP connection as :class:`SmtpSettings` (the SMTP provider's extras: ``from_email``,
    ``disable_ssl``, ``disable_tls``, ``timeout``, ``retry_limit``); ``None`` when there is no such connection."""
    conn = _optional_connection(conn_id)
    if conn is None:
        return None
    extra = conn.extra_dejson
    disable_ssl, disable_tls = _flag(extra.get("disable_ssl")), _flag(extra.get("disable_tls"))
    security = "ssl" if not disable_ssl else "none" if disable_tls else "starttls"
    return SmtpSettings(
        host=conn.host,
        port=conn.port or (465 if security == "ssl" else 587),
        user=conn.login or None,
        password=_secret(conn.password) if conn.login else None,
        security=security,
        from_addr=extra.get("from_email") or f"mavias@{conn.host}",
        timeout=float(extra.get("timeout", 30)),
        max_attempts=int(extra.get("retry_limit", 5)),
    )
