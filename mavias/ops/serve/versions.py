"""Model versions for the server: load one beside the serving one, verify it, swap atomically; follow the registry.

A version folder holds ``model_card.json`` and the ONNX file it names. Loading checks the file's sha256 against the
card, opens an ONNX Runtime session (CUDA when present, else CPU), checks the graph's input/output against the card
and runs one warm-up batch; only then does the new version replace the old one (a single reference swap, so a
request in flight finishes on the version it started with). A version that fails any step (also a card that
disagrees with its graph: :mod:`mavias.ops.serve.card_check`) is refused and the old one keeps serving. Nothing here
imports torch.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from botocore.exceptions import ClientError

from mavias.errors import UserError
from mavias.ops.export.session import make_session
from mavias.ops.registry import ModelRegistry
from mavias.ops.serve.card_check import card_disagreements
from mavias.ops.serve.metrics import LAST_POLL, POLL_AGE, POLL_ERRORS
from mavias.ops.serve.preprocess import Preprocessing, card_preprocessing
from mavias.storage.s3 import download_file
from mavias.utils.disk import sha256_file

log = logging.getLogger(__name__)

CARD_NAME = "model_card.json"


class VersionRefused(RuntimeError):
    """A version that cannot be served: missing files, a checksum mismatch, a graph ONNX Runtime cannot load."""


@dataclass(frozen=True)
class ServedVersion:
    version: str
    card: dict[str, Any]
    session: ort.InferenceSession
    preprocessing: Preprocessing
    input_name: str
    output_name: str
    image_shape: tuple[int, int, int]  # C, H, W
    classes: list[str]

    def run(self, batch: np.ndarray) -> np.ndarray:
        return self.session.run([self.output_name], {self.input_name: batch})[0]


def _read_card(folder: Path) -> tuple[dict[str, Any], Path, str]:
    try:
        card = json.loads((folder / CARD_NAME).read_text())
        return card, folder / card["onnx"]["file"], card["onnx"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise VersionRefused(f"{folder}: no readable {CARD_NAME} naming an ONNX file and its sha256 ({err})") from err


def load_version(folder: Path, version: str | None = None, *, providers: list[str] | None = None) -> ServedVersion:
    """Load and verify the version in ``folder``; raise :class:`VersionRefused` with the reason otherwise.

    ``version`` is the registry's name for it (metrics, answers); default: the card's.
    """
    card, onnx_path, expected = _read_card(folder)
    if not onnx_path.is_file():
        raise VersionRefused(f"{onnx_path} is missing")
    actual = sha256_file(onnx_path)
    if actual != expected:
        raise VersionRefused(f"{onnx_path}: sha256 {actual[:12]}… does not match the model card's {expected[:12]}…")
    try:
        session = make_session(onnx_path, providers=providers)
        (graph_input,), (graph_output,) = session.get_inputs(), session.get_outputs()
        channels, height, width = (int(d) for d in graph_input.shape[1:])
        served = ServedVersion(
            version=version or str(card["version"]), card=card, session=session,
            preprocessing=card_preprocessing(card), input_name=graph_input.name, output_name=graph_output.name,
            image_shape=(channels, height, width), classes=list(card["classes"]),
        )
        problems = card_disagreements(card, served.preprocessing, onnx_path, session)
        logits = served.run(np.zeros((1, channels, height, width), np.float32))
    except Exception as err:  # noqa: BLE001 - whatever breaks a candidate, the serving version stays
        raise VersionRefused(f"{onnx_path}: cannot be served: {err}") from err
    if problems:
        raise VersionRefused(f"{folder}: the model card disagrees with the ONNX graph: {'; '.join(problems)}")
    if logits.shape != (1, len(served.classes)):
        raise VersionRefused(f"{onnx_path}: outputs {logits.shape[1:]} logits for {len(served.classes)} classes")
    return served


class ModelSlot:
    """The version being served, replaced atomically; callbacks observe loads and refusals (metrics, logs)."""

    def __init__(self, on_loaded: Callable[[ServedVersion, ServedVersion | None, float], None],
                 on_refused: Callable[[str, str], None]):
        self.current: ServedVersion | None = None
        self._on_loaded, self._on_refused = on_loaded, on_refused
        self._lock = threading.Lock()  # one load at a time

    def load(self, folder: Path, version: str | None) -> bool:
        """Load ``folder`` as ``version`` (the registry's name; ``None``: the card's)."""
        with self._lock:
            started = time.perf_counter()
            try:
                served = load_version(folder, version)
            except VersionRefused as err:
                self._on_refused(version or str(folder), str(err))
                return False
            previous, self.current = self.current, served
            self._on_loaded(served, previous, time.perf_counter() - started)
            return True


class RegistryFollower:
    """Polls the production pointer's ETag; on a change, downloads the production version and loads it.

    A refused version is not retried until the pointer changes again (a promotion or a rollback). A poll that fails
    for any reason (S3 down, a corrupt pointer, an unsafe version name, a full disk) is logged with its stack,
    counted in ``mavias_registry_poll_errors_total`` and retried at the next poll; :attr:`age_s` is the time since
    the last successful poll, for readiness and ``mavias_registry_poll_age_seconds``.
    """

    def __init__(self, registry: ModelRegistry, slot: ModelSlot, cache_dir: Path, *, poll_s: float):
        self.registry, self.slot, self.cache_dir, self.poll_s = registry, slot, cache_dir, poll_s
        self.seen_etag: str | None = None
        self.last_success = time.monotonic()  # the start counts: a registry down from the start is stale too
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registry-follower", daemon=True)
        POLL_AGE.labels(registry.name).set_function(lambda: self.age_s)

    @property
    def age_s(self) -> float:
        return time.monotonic() - self.last_success

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.poll_s)
        log.info("registry follower stopped")

    def poll_once(self) -> bool:
        """One poll; never raises (the follower must outlive every error). True when it succeeded."""
        try:
            self.poll()
        except Exception as err:  # noqa: BLE001 - logged with its stack and counted; the next poll retries
            POLL_ERRORS.labels(self.registry.name, type(err).__name__).inc()
            log.exception("registry_poll_failed", extra={
                "model": self.registry.name, "error": type(err).__name__, "retry_in_s": self.poll_s,
                "last_success_age_s": round(self.age_s, 1)})
            return False
        self.last_success = time.monotonic()
        LAST_POLL.labels(self.registry.name).set(time.time())
        return True

    def _pointer_etag(self) -> str | None:
        settings = self.registry.settings
        try:
            return self.registry.client.head_object(Bucket=settings.bucket, Key=self.registry.pointer_key)["ETag"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return None
            raise

    def poll(self) -> None:
        etag = self._pointer_etag()
        if etag is None or etag == self.seen_etag:
            return
        record = self.registry.production()
        if record is None:
            return
        current = self.slot.current
        if current is None or current.version != record.version:
            log.info("production of %s is now %s (%s)", self.registry.name, record.version, record.action)
            if self.slot.load(self._download(record.version), record.version):
                self._prune(keep={record.version, current.version if current else ""})
        self.seen_etag = record.etag  # only now: a transient S3 error above is retried at the next poll

    def _prune(self, keep: set[str]) -> None:
        """Delete the downloaded versions (folders with a model card, also from before a restart) but ``keep`` (the
        one served, the one before): the cache would otherwise grow with every promotion."""
        for card in sorted(self.cache_dir.glob(f"*/{CARD_NAME}")):
            if card.parent.name not in keep:
                shutil.rmtree(card.parent, ignore_errors=True)  # a leftover goes at the next swap

    def _download(self, version: str) -> Path:
        """The version's card and the ONNX file it names (not the checkpoint) into the cache folder.

        A missing or unreadable file is left missing, for :func:`load_version` to refuse the version; other S3
        errors propagate, to be retried at the next poll.
        """
        folder = self.cache_dir / version
        prefix = f"{self.registry.prefix}{version}/"
        client, settings = self.registry.client, self.registry.settings
        try:
            download_file(client, settings, prefix + CARD_NAME, folder / CARD_NAME)
            onnx_name = Path(json.loads((folder / CARD_NAME).read_text())["onnx"]["file"]).name
            download_file(client, settings, prefix + onnx_name, folder / onnx_name)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise
            log.warning("version %s: %s", version, err)
        except (ValueError, KeyError, TypeError) as err:
            log.warning("version %s: unreadable %s: %s", version, CARD_NAME, err)
        return folder


def registry_location(uri: str) -> tuple[str, str]:
    """``s3://bucket/models`` -> (bucket, models prefix)."""
    if not uri.startswith("s3://") or len(uri) <= len("s3://"):
        raise UserError(f"--registry {uri!r}: expected s3://BUCKET/PREFIX, e.g. s3://my-bucket/models")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    return bucket, prefix
