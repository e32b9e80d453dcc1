"""Preflight of a night: fail in seconds, with what to do, when the pool or a connection the DAG needs is missing
(a task on a missing pool would otherwise wait in ``scheduled`` until the run times out), or when the bucket ignores
conditional writes (:mod:`mavias.storage.conditional`).

Task code cannot read the metadata DB in Airflow 3, so the pool is looked up through the REST API of the
``api_conn_id`` connection (an ``http`` connection; login/password when the API wants them). Without that
connection (e.g. ``airflow dags test``) the pool is not checked, and the log says so.
"""

from __future__ import annotations

import logging
import os

import httpx
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from botocore.exceptions import BotoCoreError, ClientError

from mavias.core.judging.llm import API_KEY_ENV, key_may_travel
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import s3_client
from mavias.ops.nightly.weights import missing_model_weights
from mavias.storage.conditional import conditional_write_problem
from mavias.storage.mistakes import storage_user_error
from mavias.storage.s3 import retry_transient

log = logging.getLogger(__name__)


def _connection_exists(conn_id: str) -> bool:
    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def _api_client(conn_id: str) -> httpx.Client | None:
    if not _connection_exists(conn_id):
        return None
    conn = BaseHook.get_connection(conn_id)
    base = f"{conn.schema or 'http'}://{conn.host}{f':{conn.port}' if conn.port else ''}"
    client = httpx.Client(base_url=base, timeout=20)
    if conn.login:
        reply = client.post("/auth/token", json={"username": conn.login, "password": conn.password})
    else:
        reply = client.get("/auth/token")  # an API that lets everybody in (simple auth manager, all admins)
    reply.raise_for_status()
    client.headers["Authorization"] = f"Bearer {reply.json()['access_token']}"
    return client


def pool_problem(pool: str, api_conn_id: str) -> str | None:
    client = _api_client(api_conn_id)
    if client is None:
        log.warning("pool %r not checked: no %r connection to Airflow's REST API", pool, api_conn_id)
        return None
    try:
        reply = client.get(f"/api/v2/pools/{pool}")
    finally:
        client.close()
    if reply.status_code == 404:
        return (f"pool {pool!r} does not exist, so the GPU tasks would never start: create it with "
                f"`airflow pools set {pool} 1 'GPU workers'` (or `mavias airflow up`), then clear this run")
    reply.raise_for_status()
    if reply.json().get("slots", 0) == 0:
        return f"pool {pool!r} has 0 slots: give it at least one (`airflow pools set {pool} 1 'GPU workers'`)"
    return None


def llm_problems(cfg: NightlyConfig) -> list[str]:
    """What keeps ``discovery.judge: llm`` from reaching its LLM (a night with one only falls back, quietly worse)."""
    if cfg.discovery.judge != "llm":
        return []
    conn_id = cfg.airflow.llm_conn_id
    if not _connection_exists(conn_id) and not os.environ.get("MAVIAS_LLM_BASE_URL"):
        return [f"discovery.judge is llm but there is no connection {conn_id!r}: add it (`airflow connections add "
                f"{conn_id} --conn-type http --conn-host https://api.openai.com/v1 --conn-password $KEY "
                "--conn-extra '{\"model\": \"gpt-4o\"}'`, docs/llm-judge.md) or set MAVIAS_LLM_BASE_URL"]
    settings = cfg.judge_settings()
    has_key = settings.api_key is not None or any(os.environ.get(name) for name in API_KEY_ENV)
    if has_key and not key_may_travel(settings.base_url):
        return [f"the LLM key would travel in clear text to {settings.base_url}: use https or a server on this "
                f"machine in connection {conn_id!r}"]
    return []


def store_problem(cfg: NightlyConfig) -> str | None:
    """Why the bucket cannot hold the nightly's state: it ignores conditional writes, or it cannot be used at all
    (no credentials, refused ones, no such bucket, no store at the endpoint). An outage is retried like a step's."""
    try:
        return retry_transient(cfg.s3)(conditional_write_problem, s3_client(cfg, "preflight"), cfg.s3)
    except (BotoCoreError, ClientError) as error:
        mistake = storage_user_error(error)
        if mistake is None:
            raise
        return str(mistake)


def preflight_problems(cfg: NightlyConfig) -> list[str]:
    """What is missing for tonight's run; an empty list when it can start."""
    problems = []
    if cfg.report.recipients and not _connection_exists(cfg.airflow.smtp_conn_id):
        problems.append(f"connection {cfg.airflow.smtp_conn_id!r} (SMTP) is missing but the report has recipients: "
                        f"add it (`airflow connections add {cfg.airflow.smtp_conn_id} --conn-type smtp ...`)")
    if not _connection_exists(cfg.airflow.aws_conn_id):
        log.info("no %r connection: S3 credentials come from the AWS environment", cfg.airflow.aws_conn_id)
    problems += missing_model_weights(cfg) + llm_problems(cfg)
    found = [store_problem(cfg), pool_problem(cfg.airflow.gpu_pool, cfg.airflow.api_conn_id)]
    return problems + [problem for problem in found if problem]
