"""Warm starts of the nightly training: a night that adds images to the classes of the promoted model trains its ERM
reference and its MAVias trials from that night's reference and candidate, for the share of a cold training's steps
that the new images plus a replay of the old ones make up (batches drawn from all the accumulated data, as cold).

It trains from scratch instead, and says why, when warm starts are off, the night was triggered with
``full_retrain``, nothing was promoted yet, production is not the promoted night's model (a rollback), the last two
candidates failed their gates, the promoted model descends from ``train.full_retrain_every`` - 1 warm nights in a
row, the training settings or the classes changed, any of the promoted model's training images is gone, or no
training image is new.

What the next night starts from lives in ``warm/``: ``state.json`` (:class:`WarmState`) and, per promoted night,
copies of its two checkpoints and its training sample ids (retention may delete the training folder they came from).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from mavias.core.train.checkpoints import EARLY_CHECKPOINT
from mavias.core.train.warm import WarmStart, warm_fraction
from mavias.ops.nightly.artifacts import Candidate, Dataset, Gates, Promoted, StartPlan, TrainedReference
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import layout
from mavias.utils.atomic import atomic_path, write_json

WARM_OFF = "warm starts are off (train.warm_start: false)"
FAILED_GATES_LIMIT = 2  # candidates in a row that failed their gates before a night trains from scratch
STATE_NAME, REFERENCE_NAME, CANDIDATE_NAME, IDS_NAME = "state.json", "reference.pt", "candidate.pt", "train_ids.parquet"
PROXY_NAME = "reference-early.pt"  # the reference's early, bias-amplified proxy, which warm references keep


class Lineage(BaseModel):
    """The promoted night a warm start would start from."""

    model_config = ConfigDict(extra="forbid")
    night: str
    classes: list[str]
    settings: str  # digest of the training settings it was trained with
    warm_chain: int  # warm nights in a row behind this model (0: it trained from scratch)


class WarmState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    promoted: Lineage | None = None
    failed_nights: list[str] = []  # nights since the promotion whose candidate failed its gates


def _folder(cfg: NightlyConfig) -> Path:
    return layout(cfg).root / "warm"


def read_state(cfg: NightlyConfig) -> WarmState:
    path = _folder(cfg) / STATE_NAME
    return WarmState.model_validate_json(path.read_text()) if path.is_file() else WarmState()


def _write_state(cfg: NightlyConfig, state: WarmState) -> None:
    write_json(_folder(cfg) / STATE_NAME, state.model_dump(mode="json"))


def _settings_digest(cfg: NightlyConfig) -> str:
    return hashlib.sha256(cfg.training.model_dump_json().encode()).hexdigest()[:16]


def _cold(reason: str) -> StartPlan:
    return {"mode": "cold", "reason": reason, "fraction": 1.0, "from_night": None, "chain": 0}


def night_plan(cfg: NightlyConfig, dataset: Dataset, classes: list[str], train_ids: pd.Series, *,
               production_night: str | None, full_retrain: bool) -> StartPlan:
    """Tonight's plan (:func:`plan_start`), decided once: a retried or cleared task reads the plan its first try
    decided (``<dataset>/start-<night>.json``), whatever was recorded since."""
    path = Path(dataset["dir"]) / f"start-{dataset['night']}.json"
    if path.is_file():
        return json.loads(path.read_text())
    plan = plan_start(cfg, classes, train_ids, production_night=production_night, full_retrain=full_retrain)
    write_json(path, plan)
    return plan


def plan_start(cfg: NightlyConfig, classes: list[str], train_ids: pd.Series, *, production_night: str | None,
               full_retrain: bool) -> StartPlan:
    """Whether tonight trains warm (and for which share of the steps) or from scratch, and why; ``production_night``
    is the night production's version was trained on (None: no production)."""
    state = read_state(cfg)
    if reason := _settings_against_warm(cfg, state, classes, production_night, full_retrain=full_retrain):
        return _cold(reason)
    promoted = state.promoted
    old = set(pd.read_parquet(_folder(cfg) / promoted.night / IDS_NAME)["sample_id"])
    if gone := len(old - set(train_ids.astype(str))):
        return _cold(f"{gone} of the promoted model's {len(old)} training images are no longer in tonight's data")
    new = len(train_ids) - len(old)
    if new == 0:
        return _cold("no new training image: tonight's change is in the tags, the relevance or the settings")
    fraction = warm_fraction(new, len(old), cfg.train.warm_replay)
    return {"mode": "warm", "reason": f"{new} new training images beside {len(old)} the promoted model of "
            f"{promoted.night} was trained on: {fraction:.0%} of a cold training's steps "
            f"({cfg.train.warm_replay:.0%} of the old images replayed)", "fraction": fraction,
            "from_night": promoted.night, "chain": promoted.warm_chain + 1}


def _settings_against_warm(cfg: NightlyConfig, state: WarmState, classes: list[str], production_night: str | None,
                           *, full_retrain: bool) -> str | None:
    """Why tonight must train from scratch whatever its images, or None."""
    train, promoted = cfg.train, state.promoted
    if not train.warm_start:
        return WARM_OFF
    if full_retrain:
        return "the night was triggered with full_retrain"
    if promoted is None:
        return "no model was promoted yet"
    if production_night != promoted.night:
        return (f"production ({production_night or 'none'}'s model) is not the model promoted on {promoted.night}, "
                "what a warm night would start from (a rollback?)")
    if len(state.failed_nights) >= FAILED_GATES_LIMIT:
        return f"the candidates of the last {len(state.failed_nights)} nights failed their gates"
    if promoted.warm_chain + 1 >= train.full_retrain_every:
        return (f"the promoted model descends from {promoted.warm_chain} warm night(s) in a row, and "
                f"train.full_retrain_every is {train.full_retrain_every}")
    if promoted.settings != _settings_digest(cfg):
        return f"the training settings changed since {promoted.night} (train.preset, config or overrides)"
    if promoted.classes != classes:
        return f"the classes changed since {promoted.night} ({', '.join(promoted.classes)} -> {', '.join(classes)})"
    folder = _folder(cfg) / promoted.night
    if not all((folder / name).is_file() for name in (REFERENCE_NAME, CANDIDATE_NAME, IDS_NAME)):
        return f"the warm-start files of {promoted.night} are missing from {folder}"
    return None


def describe(plan: StartPlan) -> str:
    return f"trained {'warm' if plan['mode'] == 'warm' else 'from scratch'}: {plan['reason']}"


def warm_start(cfg: NightlyConfig, plan: StartPlan, model: str) -> WarmStart | None:
    """The warm start of ``model`` ("reference" or "candidate") under ``plan``; None when it trains cold."""
    if plan["mode"] != "warm":
        return None
    folder = _folder(cfg) / str(plan["from_night"])
    if model == "reference":
        return WarmStart(folder / REFERENCE_NAME, plan["fraction"], proxy=folder / PROXY_NAME)
    return WarmStart(folder / CANDIDATE_NAME, plan["fraction"])


def record_outcome(cfg: NightlyConfig, dataset: Dataset, reference: TrainedReference | None,
                   candidate: Candidate | None, gates: Gates | None, promoted: Promoted | None) -> dict[str, Any]:
    """After the night: a promoted candidate becomes what the next night starts from; a candidate that failed its
    gates is counted. Idempotent: a rerun of the night records the same."""
    if reference is None or candidate is None:
        return {"warm_start": "nothing trained"}
    state, night = read_state(cfg), dataset["night"]
    if promoted and promoted.get("in_production"):
        if state.promoted is None or state.promoted.night != night:
            _keep_checkpoints(cfg, night, reference, candidate)
            lineage = Lineage(night=night, classes=reference["classes"], settings=_settings_digest(cfg),
                              warm_chain=reference["start"]["chain"])
            _write_state(cfg, WarmState(promoted=lineage))
            _prune(cfg, keep=night)
        return {"warm_start": f"the next night can start from {night}"}
    if gates is not None and not gates["passed"]:
        if night not in state.failed_nights:
            _write_state(cfg, state.model_copy(update={"failed_nights": [*state.failed_nights, night]}))
        return {"warm_start": f"{night}'s candidate failed its gates"}
    if gates is not None and state.failed_nights:  # passed, not promoted: the failures are no longer in a row
        _write_state(cfg, state.model_copy(update={"failed_nights": []}))
    return {"warm_start": "nothing to change"}


def write_train_ids(train_ids: pd.Series, run_dir: Path) -> None:
    """The training sample ids of a reference run (what a later night compares its data with)."""
    with atomic_path(Path(run_dir) / IDS_NAME) as tmp:
        pd.DataFrame({"sample_id": train_ids.astype(str).to_numpy()}).to_parquet(tmp, index=False)


def _keep_checkpoints(cfg: NightlyConfig, night: str, reference: TrainedReference, candidate: Candidate) -> None:
    folder = _folder(cfg) / night
    early = Path(reference["dir"]) / EARLY_CHECKPOINT  # absent when the run was too short to keep one
    sources = ((reference["checkpoint"], REFERENCE_NAME), (candidate["checkpoint"], CANDIDATE_NAME),
               (Path(reference["dir"]) / IDS_NAME, IDS_NAME), *([(early, PROXY_NAME)] if early.is_file() else []))
    for source, name in sources:
        with atomic_path(folder / name) as tmp:
            shutil.copyfile(source, tmp)


def _prune(cfg: NightlyConfig, keep: str) -> None:
    for folder in _folder(cfg).iterdir():
        if folder.is_dir() and folder.name != keep:
            shutil.rmtree(folder, ignore_errors=True)
