"""What an audit is asked to do (:class:`AuditOptions`), where it writes (:class:`AuditPaths`), and its state file,
which makes a second run resume: a finished step is not done again, a training resumes from its last epoch."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mavias.core.evaluate.metrics import MIN_SUPPORT
from mavias.core.judging.base import shown_url
from mavias.core.judging.factory import JudgeSettings
from mavias.core.tagging.factory import TaggerSettings
from mavias.errors import UserError
from mavias.utils.atomic import write_json
from mavias.utils.disk import sha256_file

PARTITION = "data"  # the audited data's partition name in the discovery workspace


@dataclass(frozen=True)
class AuditOptions:
    path: Path  # an ImageFolder, a published dataset layout, or a manifest
    out: Path
    tags: Path | None = None  # a tags sidecar
    layout: str = "auto"
    min_support: int = MIN_SUPPORT
    tagger: TaggerSettings = TaggerSettings()  # used when the data brings no tags of its own
    allow_random_tags: bool = False  # tags of an untrained model are noise: refused unless asked for
    judge: JudgeSettings = JudgeSettings()
    review: Path | None = None  # reviewed relevance decisions (`mavias judge export-review`), winning over the judge's
    config: Path | None = None  # training settings: none of the audit's own, the recipe's unless given here
    preset: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    gates: Path | None = None
    device: str = "auto"
    name: str | None = None  # the model's name; default the data folder's
    progress: bool = True

    def inputs(self) -> dict[str, Any]:
        """What the outputs depend on (``min_support`` only decides B' and the flags, which are recomputed)."""
        tagger = {k: v for k, v in asdict(self.tagger).items()
                  if k not in ("kind", "device", "cache_dir", "weights_dir", "allow_download")}
        judge = self.judge
        judged_by = [judge.kind, shown_url(judge.base_url), judge.model] if judge.kind != "offline" else judge.kind
        return {"path": str(self.path.resolve()), "layout": self.layout,
                "tags": None if self.tags is None else _digest(self.tags), "tagger": _jsonable(tagger),
                "judge": judged_by,
                "config": None if self.config is None else _digest(self.config), "preset": self.preset,
                "overrides": _jsonable(self.overrides)}


    def review_digest(self) -> str | None:
        return None if self.review is None else _digest(self.review)


def audit_version(inputs: dict[str, Any], review: str | None = None) -> str:
    """The audit's version name (model card, report): the same inputs (and review) give the same name."""
    named = inputs if review is None else {**inputs, "review": review}
    return "audit-" + hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:8]


def _digest(path: Path) -> str:
    if not path.is_file():
        raise UserError(f"{path} does not exist; check the path")
    return sha256_file(path)[:16]


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@dataclass(frozen=True)
class AuditPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def manifest(self) -> Path:
        return self.data / "manifest.parquet"

    @property
    def validation(self) -> Path:
        return self.data / "validation.json"

    @property
    def workspace(self) -> Path:
        """A discovery workspace (:class:`mavias.core.discovery.Workspace`) holding the one partition ``data``."""
        return self.root / "workspace"

    @property
    def reference(self) -> Path:
        return self.root / "reference"

    @property
    def mavias(self) -> Path:
        return self.root / "mavias"

    def evaluation(self, role: str) -> Path:
        return self.root / "eval" / role

    @property
    def model(self) -> Path:
        return self.root / "model" / "model.onnx"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def biased_tags(self) -> Path:
        return self.root / "biased_tags.csv"

    @property
    def state(self) -> Path:
        return self.root / "audit.json"


class AuditState:
    """``audit.json``: the inputs the folder holds an audit of, the steps finished, what they warned about.

    Other inputs start the audit again while no more than the import is done (e.g. a first run stopped for want of
    tagger weights, and the second brings its own tags); after that they are refused."""

    def __init__(self, paths: AuditPaths, inputs: dict[str, Any]):
        self.path = paths.state
        document = _read_state(paths) if self.path.is_file() else {"inputs": inputs}
        if document["inputs"] != inputs:
            if set(document.get("done", {})) - {"import"}:
                raise UserError(f"{paths.root} holds an audit of other data or settings ({self.path}); pass another "
                                "--out, or delete that folder to start again")
            document = {"inputs": inputs}
            # shards an interrupted tagger left, and runs of the other data (a run kept across a review change)
            for derived in (paths.workspace / "tags", paths.reference, paths.mavias, paths.root / "eval",
                            paths.model.parent):
                shutil.rmtree(derived, ignore_errors=True)
            write_json(self.path, {"inputs": inputs, "done": {}})  # the other data's import is no longer done
        self.document = {"done": {}, **document}

    def follow_review(self, digest: str | None, paths: AuditPaths) -> None:
        """Another review than the decisions were made with (or none where there was one) is not another audit: the
        judging is done again (the tags and the judge's own decisions come from their caches) and MAVias trains again
        on the new bias embeddings. The ERM reference never reads relevance, so it is kept; its B' is recomputed."""
        if self.document.get("review") == digest:
            return
        if self.done("discover") is not None:
            shutil.rmtree(paths.mavias, ignore_errors=True)
            del self.document["done"]["discover"]
        self.record(review=digest)

    def done(self, step: str) -> dict[str, Any] | None:
        """What a finished step recorded, or None when it has not finished."""
        return self.document["done"].get(step)

    def finish(self, step: str, record: dict[str, Any]) -> None:
        self.document["done"][step] = _jsonable(record)
        write_json(self.path, self.document)

    def record(self, **values: Any) -> None:
        self.document.update(_jsonable(values))
        write_json(self.path, self.document)


def _read_state(paths: AuditPaths) -> dict[str, Any]:
    """``audit.json`` as written (a mapping with the ``inputs`` and the ``done`` steps), or one line saying what to do."""
    try:
        document = json.loads(paths.state.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        document = error
    if not (isinstance(document, dict) and isinstance(document.get("inputs"), dict)
            and isinstance(document.get("done", {}), dict)):
        raise UserError(f"{paths.state} is not an audit's record (damaged or written by something else); delete "
                        f"{paths.root} to start again, or pass another --out")
    return document
