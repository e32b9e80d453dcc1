"""The deployment of the fault nights (`test_nightly_faults.py`): what was uploaded, the nights run so far, whether
any data was lost, and the table of them all as BENCHMARKS.md records it.

Data lost: an uploaded image that is neither trained on, nor held back with its reason (a quarantined row or
partition), nor waiting in incoming/ for a later night; and no object of incoming/ may disappear.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pandas as pd

from mavias.core.manifest import content_sample_id
from mavias.ops.nightly.incoming import ProcessedLedger
from mavias.storage.s3 import get_json, list_objects
from mavias.tools.demo.run import DemoData
from tests.airflow.harness import Deployment, Night
from tests.support.s3server import FaultInjectingProxy


@dataclass
class FaultNight:
    fault: str
    expected: str
    night: Night
    subject: str  # the night's email subject, "" when none arrived
    lost: list[str]  # uploaded images not trained on, not held back with a reason, not waiting for a retry
    seconds: float
    facts: dict = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        verdict = self.subject.split(": ", 1)[-1] if self.subject else "(no report)"
        return f"{verdict} [run {'success' if self.night.returncode == 0 else 'failed'}]"


class Scenario:
    """The deployment, what was uploaded to incoming/, and the nights run so far."""

    def __init__(self, deployment: Deployment, scenes: DemoData, proxy: FaultInjectingProxy):
        self.d, self.scenes, self.proxy = deployment, scenes, proxy
        self.uploaded = pd.DataFrame(columns=["sample_id", "uri", "partition"])
        self.nights: dict[str, FaultNight] = {}
        self.day = 0
        self.pool = pd.concat(list(scenes.partitions.values()), ignore_index=True)
        self.next_row = 0
        self.withheld: set[str] = set()  # incoming keys the producer has not uploaded yet (not lost)

    def rows(self, n: int, *, split: str | None = None, without: str | None = None) -> pd.DataFrame:
        """``n`` images of the pool never uploaded before."""
        pool = self.pool.iloc[self.next_row:]
        chosen = pool[(pool["split"] == split) if split else pool["split"].notna()]
        chosen = chosen[chosen["label"] != without] if without else chosen
        chosen = chosen.head(n)
        self.next_row = int(chosen.index.max()) + 1
        return chosen.reset_index(drop=True)

    def corrupt(self, rows: pd.DataFrame, count: int, tag: str) -> pd.DataFrame:
        """``count`` more rows like the first ones of ``rows`` whose image files do not decode."""
        broken = []
        for i in range(count):
            payload = f"not a png: {tag} {i}".encode()
            uri = f"images/corrupt/{tag}-{i}.png"
            (self.scenes.root / uri).parent.mkdir(parents=True, exist_ok=True)
            (self.scenes.root / uri).write_bytes(payload)
            broken.append(rows.iloc[i % len(rows)].to_dict() | {"sample_id": content_sample_id(payload), "uri": uri})
        return pd.concat([rows, pd.DataFrame(broken)], ignore_index=True)

    def upload(self, partition: str, rows: pd.DataFrame) -> None:
        self.d.upload(f"incoming/{partition}/", self.scenes, rows, partition)
        self.uploaded = pd.concat([self.uploaded, rows[["sample_id", "uri"]].assign(partition=partition)],
                                  ignore_index=True)

    def night(self, fault: str, expected: str, **run: object) -> FaultNight:
        self.day += 1
        day = date(2025, 2, self.day)
        emails = len(self.d.emails())
        started = time.monotonic()
        night = self.d.run_night(day, **run)
        seconds = time.monotonic() - started
        name = day.strftime("%Y%m%d")
        subjects = [str(e["Subject"]) for e in self.d.emails()[emails:] if name in str(e["Subject"])]
        result = FaultNight(fault, expected, night, subjects[-1] if subjects else "", self.lost(), seconds)
        self.nights[fault] = result
        return result

    def lost(self) -> list[str]:
        kept = _trained(self.d.workspace) | _held_back(self.d) | self._waiting()
        present = {o.key for o in list_objects(self.d.client, self.d.settings, "incoming/")} | self.withheld
        missing = set(self._incoming_keys()) - present
        return sorted(set(self.uploaded["sample_id"]) - kept) + sorted(f"deleted {k}" for k in missing)

    def _incoming_keys(self) -> list[str]:
        return [f"incoming/{row.partition}/{row.uri}" for row in self.uploaded.itertuples()]

    def _waiting(self) -> set[str]:
        """Images of partitions neither processed nor quarantined: the next night takes them."""
        ledger = ProcessedLedger(self.d.client, self.d.settings)
        done = ledger.processed() | ledger.quarantined()
        return set(self.uploaded.loc[~self.uploaded["partition"].isin(done), "sample_id"])


def _trained(workspace: Path) -> set[str]:
    ids: set[str] = set()
    for manifest in workspace.glob("training/*/dataset/manifest.parquet"):
        frame = pd.read_parquet(manifest)
        quarantine = manifest.with_name("quarantine.csv")
        held = set(pd.read_csv(quarantine)["sample_id"]) if quarantine.exists() else set()
        ids |= set(frame.loc[frame["split"].isin(["train", "val"]), "sample_id"]) - held
    return ids


def _held_back(d: Deployment) -> set[str]:
    """Rows quarantined with a reason: by validation (per row or whole partition) or by decoding at preparation."""
    ids: set[str] = set()
    for path in d.workspace.glob("nights/*/validation/*.json"):
        ids |= {row["sample_id"] for row in json.loads(path.read_text())["quarantined"]}
    for path in d.workspace.glob("training/*/dataset/quarantine.csv"):
        ids |= set(pd.read_csv(path)["sample_id"])
    for partition in ProcessedLedger(d.client, d.settings).quarantined():
        record = get_json(d.client, d.settings, f"quarantine/{partition}/validation.json")
        manifest = d.workspace / "partitions" / partition / "manifest.parquet"
        if record is not None and manifest.exists():
            ids |= set(pd.read_parquet(manifest)["sample_id"])
    return ids


def print_table(nights: list[FaultNight]) -> None:
    """The faults table, as recorded in BENCHMARKS.md."""
    lines = ["| fault | expected | night outcome (email subject verdict) [run] | report sent | data lost | wall s |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {n.fault} | {n.expected} | {n.outcome} | {'yes' if n.subject else 'NO'} | "
              f"{'none' if not n.lost else f'{len(n.lost)}: {n.lost[:3]}'} | {n.seconds:.0f} |" for n in nights]
    print("\n" + "\n".join(lines))
