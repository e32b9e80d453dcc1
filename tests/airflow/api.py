"""The REST API of a stack started by `mavias airflow up` (the simple auth manager lets everybody in as admin on a
local stack): trigger a night, follow it, read its task instances."""

from __future__ import annotations

import time

import httpx

from mavias.tools.demo.services import DAG_ID


class Api:
    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=30)
        token = self.client.get("/auth/token").json()["access_token"]
        self.client.headers["Authorization"] = f"Bearer {token}"

    def wait_for_dag(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while self.client.get(f"/api/v2/dags/{DAG_ID}").status_code != 200:
            assert time.monotonic() < deadline, "the dag-processor did not parse the DAG in time"
            time.sleep(2)

    def trigger(self, logical_date: str | None) -> str:
        reply = self.client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": logical_date, "conf": {}})
        reply.raise_for_status()
        return reply.json()["dag_run_id"]

    def state(self, run_id: str) -> str:
        return self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").json()["state"]

    def wait(self, run_id: str, timeout_s: float) -> str:
        """Poll the run to its end; its final state."""
        deadline = time.monotonic() + timeout_s
        while (state := self.state(run_id)) not in ("success", "failed"):
            assert time.monotonic() < deadline, f"run {run_id} still {state} after {timeout_s:.0f} s"
            time.sleep(2)
        return state

    def task_instances(self, run_id: str) -> list[dict]:
        """Every task instance of the run, mapped ones included (task_id, map_index, state, queue, hostname…)."""
        reply = self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 500})
        reply.raise_for_status()
        return reply.json()["task_instances"]

    def run_night(self, logical_date: str | None, timeout_s: float) -> tuple[str, dict[str, str], float]:
        """Trigger a run (``None``: a manual run without a logical date) and poll it to its end; (state, task states
        of the unmapped tasks, seconds)."""
        started = time.monotonic()
        run_id = self.trigger(logical_date)
        state = self.wait(run_id, timeout_s)
        tasks = {t["task_id"]: t["state"] for t in self.task_instances(run_id) if t["map_index"] < 0}
        return state, tasks, time.monotonic() - started
