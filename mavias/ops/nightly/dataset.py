"""The night's dataset (``prepare_dataset``): the accumulated training data of every processed partition and
tonight's, with the fixed evaluation set as ``test``, prepared once (bias embeddings attached) in
``training/<digest>/`` for the training, evaluation and release stages (:func:`load_prepared`). Images are decoded
once per partition (``decoded/``), whatever the datasets they join: a night decodes its new partitions only.

The digest names the data (not where it lies), the discovery choices and the training config, so a retried or
repeated night reuses or resumes instead of retraining. The night's relevance decisions are saved with what changed
since the previous night that judged (``nights/<night>/relevance_changes.json``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from botocore.client import BaseClient

from mavias.core.judging.base import OFFLINE_SOURCE
from mavias.core.judging.quality import decision_changes
from mavias.core.judging.review import apply_review, load_review, tags_of_classes
from mavias.core.manifest import load_manifest
from mavias.core.relevance import RELEVANCE_COLUMNS, load_relevance, save_relevance
from mavias.core.tagging.run import TAGS_NAME
from mavias.core.train import prepared_io
from mavias.core.train.decoded import transform_key
from mavias.core.train.prepare import PreparedData, prepare_image_data
from mavias.core.train.transforms import DECODE
from mavias.errors import UserError
from mavias.ops.nightly.artifacts import Dataset, Validated
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.discover import make_text_encoder
from mavias.ops.nightly.layout import DECODED_KEYS_NAME, evaluation_partition, layout, pull, registry, s3_client
from mavias.ops.nightly.pull import read_pulled
from mavias.ops.registry import CorruptPointer
from mavias.ops.reporting.context import RelevanceChanges
from mavias.storage.s3 import get_json
from mavias.utils.atomic import atomic_path, write_json
from mavias.utils.disk import sha256_file

log = logging.getLogger(__name__)

PREPARED_NAME = "prepared-data.pt"  # mavias.core.train.prepared_io's format; it replaces a pickled "prepared.pt"
LEGACY_PREPARED = "prepared.pt"
SIZES_NAME = "sizes.json"
TRAIN_SPLITS = ("train", "val")
RELEVANCE_NAME, RELEVANCE_CHANGES_NAME = "relevance.parquet", "relevance_changes.json"
VERSION_DATASET = "dataset.json"  # a version folder's record of its digest (written by package.package)


def _discovered_tables(cfg: NightlyConfig, names: Iterable[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tags, relevance) over the partitions, one decision per (class, tag): a reviewed one, else (with an LLM judge)
    the LLM's over the offline judge's that stood in for it, else the first partition's."""
    ws = layout(cfg).discovery
    tags = pd.concat([pd.read_parquet(ws.tags / name / TAGS_NAME) for name in names], ignore_index=True)
    relevance = pd.concat([pd.read_parquet(ws.partition(name) / RELEVANCE_NAME) for name in names])
    stood_in = relevance["source"].str.startswith(OFFLINE_SOURCE) if cfg.discovery.judge == "llm" else False
    relevance = relevance.assign(_stood_in=stood_in).sort_values("_stood_in", kind="stable")  # the LLM's wins
    relevance = relevance[RELEVANCE_COLUMNS].drop_duplicates(["class", "tag"]).reset_index(drop=True)
    if cfg.discovery.review is not None:
        review = load_review(cfg.discovery.review)
        relevance = apply_review(relevance, review)
        for warning in review.unmatched(tags_of_classes(relevance)):
            log.warning("%s (%s)", warning, cfg.discovery.review)
    return tags.drop_duplicates(["sample_id", "tag"]), relevance


def _previous_relevance(cfg: NightlyConfig, night: str) -> Path | None:
    """The relevance table of the latest night before ``night`` that recorded one (a night that judged)."""
    earlier = [path for path in layout(cfg).nights.glob(f"*/{RELEVANCE_NAME}") if path.parent.name < night]
    return max(earlier, key=lambda path: path.parent.name, default=None)


def record_relevance_changes(cfg: NightlyConfig, night: str, relevance: pd.DataFrame) -> Path:
    """Save the night's relevance table and ``relevance_changes.json`` (:class:`RelevanceChanges`): its decisions
    against the previous night that recorded a table. A rerun of the night compares with the same night again."""
    folder = layout(cfg).night(night)
    tonight = save_relevance(relevance, folder / RELEVANCE_NAME)
    previous = _previous_relevance(cfg, night)
    changes = RelevanceChanges(
        night=night, previous_night=previous.parent.name if previous else None, relevance=str(tonight),
        review=str(cfg.discovery.review) if cfg.discovery.review else None,
        classes=decision_changes(load_relevance(previous), relevance) if previous else {},
    )
    log.info("relevance decisions: %d class(es) changed since night %s", len(changes.classes), changes.previous_night)
    return write_json(folder / RELEVANCE_CHANGES_NAME, changes.model_dump(mode="json"))


def _absolute(manifest_path: Path) -> pd.DataFrame:
    frame = load_manifest(manifest_path, check_files=False).drop(columns=["tags"], errors="ignore")
    return frame.assign(uri=[str(manifest_path.parent / uri) for uri in frame["uri"]])


def _content_digest(path: str) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None  # a missing image: quarantined when the data is prepared


def _file_size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _copies_of(uris: pd.Series, originals: pd.Series) -> pd.Series:
    """Which of ``uris`` hold the same bytes as one of ``originals``; only a file of a size some original has is
    read, so a night reads few files besides the evaluation set."""
    sizes = {size for size in originals.map(_file_size) if size is not None}
    digests = {digest for digest in originals.map(_content_digest) if digest}
    return uris.map(lambda uri: _file_size(uri) in sizes and _content_digest(uri) in digests).astype(bool)


def accumulated_manifest(partition_manifests: Iterable[Path], evaluation_manifest: Path) -> pd.DataFrame:
    """Train/val rows of every partition (first occurrence of an image wins) plus the evaluation set as the ``test``
    split; uris are absolute. An evaluation image never trains: rows are left out by content (the same bytes under
    any name) and by ``sample_id`` (tags are keyed by it, so it must stay unique)."""
    test = _absolute(evaluation_manifest).assign(split="test")
    parts = [_absolute(path) for path in partition_manifests]
    train = pd.concat(parts, ignore_index=True) if parts else test.iloc[:0]
    train = train[train["split"].isin(TRAIN_SPLITS)]
    _warn_left_out(train, train["sample_id"].isin(test["sample_id"]), "share a sample_id with an evaluation image")
    train = train[~train["sample_id"].isin(test["sample_id"])]
    seen = _copies_of(train["uri"], test["uri"])
    _warn_left_out(train, seen, "are evaluation images under other names")
    train = train[~seen]
    _warn_left_out(train, train["sample_id"].duplicated(), "repeat the sample_id of an earlier partition's image "
                   "(the first kept; a producer must give each image its own id)")
    return pd.concat([train.drop_duplicates("sample_id"), test], ignore_index=True)


def _warn_left_out(rows: pd.DataFrame, left_out: pd.Series, why: str) -> None:
    if left_out.any():
        log.warning("%d training image(s) %s (e.g. %s): left out", int(left_out.sum()), why,
                    rows.loc[left_out, "uri"].iloc[0])


def check_trainable(manifest: pd.DataFrame) -> None:
    """Every class of the evaluation set has training images, or no model can learn it (a one-line error)."""
    untrained = sorted(set(manifest.loc[manifest["split"] == "test", "label"])
                       - set(manifest.loc[manifest["split"] == "train", "label"]))
    if untrained:
        raise UserError(
            f"the training data has no image of class(es) {', '.join(untrained)}, which the evaluation set has: no "
            "model can learn them yet. Tonight's partitions are not marked processed and are taken again with the "
            "next partition that brings those classes (or evaluate on a set without them: a new evaluation.version)"
        )


def _digest(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        text = part.to_csv(index=False) if isinstance(part, pd.DataFrame) else json.dumps(part, sort_keys=True, default=str)
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def pulled_etags(manifests: Iterable[Path]) -> dict[str, str]:
    """Absolute path -> ETag of every file the pulled folders of ``manifests`` hold: what its bytes are."""
    return {str(path.parent / name): etag for path in manifests for name, etag in (read_pulled(path.parent) or {}).items()}


def dataset_digest(cfg: NightlyConfig, manifest: pd.DataFrame, tags: pd.DataFrame, relevance: pd.DataFrame,
                   etags: dict[str, str], salt: str = "") -> str:
    """Identity of a training run: the data (rows and the ETags of their files, not where they lie), the discovery
    choices and the training config."""
    rows = manifest.assign(etag=manifest["uri"].map(etags))[["sample_id", "label", "split", "etag"]]
    rows = rows.sort_values("sample_id")
    tag_rows = tags[tags["sample_id"].isin(manifest["sample_id"])][["sample_id", "tag"]].sort_values(["sample_id", "tag"])
    decisions = relevance[["class", "tag", "relevant"]].sort_values(["class", "tag"])
    choices = {"train": cfg.training.model_dump(mode="json"), "discovery": cfg.discovery.model_dump(), "salt": salt}
    return _digest(rows, tag_rows, decisions, choices)


def production_with_digest(cfg: NightlyConfig, client: BaseClient, digest: str) -> str | None:
    """The production version when it was made from exactly this data and these settings (``digest``), else None
    (also when the pointer is corrupt: the report says so)."""
    reg = registry(cfg, client)
    try:
        production = reg.production()
    except CorruptPointer:
        return None
    if production is None:
        return None
    record = get_json(client, cfg.s3, f"{reg.prefix}{production.version}/{VERSION_DATASET}")
    return production.version if record is not None and record[0].get("digest") == digest else None


def decoded_keys(data: PreparedData) -> list[str]:
    """The ``decoded/`` folders a prepared dataset's images are held in (an augmented split holds them as decoded)."""
    return sorted({transform_key(DECODE if split.augmented else split.inputs.transform)
                   for split in data.splits.values() if split.is_image})


def load_prepared(dataset: Dataset) -> PreparedData:
    return prepared_io.load_prepared(Path(dataset["dir"]) / PREPARED_NAME)


def prepare_dataset(cfg: NightlyConfig, validated: Validated, *, full_retrain: bool = False) -> Dataset:
    """Accumulated training data (all processed + tonight's partitions) with the evaluation set as ``test``,
    prepared once (images decoded, bias embeddings attached) for the training and evaluation steps."""
    client = s3_client(cfg, "prepare_dataset")
    partitions = validated["partitions"]
    manifests = [pull(cfg, client, p) for p in partitions]
    manifest = accumulated_manifest(manifests, Path(validated["evaluation"]))
    check_trainable(manifest)
    tags, relevance = _discovered_tables(cfg, [*partitions, evaluation_partition(cfg)])
    changes = record_relevance_changes(cfg, validated["night"], relevance)
    etags = pulled_etags([*manifests, Path(validated["evaluation"])])
    digest = dataset_digest(cfg, manifest, tags, relevance, etags, salt=validated["night"] if full_retrain else "")
    out = layout(cfg).training(digest)
    out.mkdir(parents=True, exist_ok=True)
    os.utime(out)  # retention keeps the datasets used last
    if not (out / PREPARED_NAME).exists():
        with atomic_path(out / "dataset" / "manifest.parquet") as tmp:
            manifest.to_parquet(tmp, index=False)
        with atomic_path(out / "dataset" / "relevance.parquet") as tmp:
            relevance.to_parquet(tmp, index=False)
        with atomic_path(out / "dataset" / "tags.parquet") as tmp:
            tags.to_parquet(tmp, index=False)
        encoder = make_text_encoder(cfg)
        data = prepare_image_data(
            out / "dataset" / "manifest.parquet", relevance=relevance, encoder=encoder,
            store_dir=layout(cfg).discovery.embeddings(encoder.encoder_id), config=cfg.training,
            tags_table=tags,
            quarantine_csv=out / "dataset" / "quarantine.csv", progress=False, decoded=layout(cfg).decoded,
        )
        sizes = {name: len(split) for name, split in data.splits.items()} | {"quarantined": len(data.quarantined)}
        write_json(out / "dataset" / SIZES_NAME, sizes)
        write_json(out / "dataset" / DECODED_KEYS_NAME, decoded_keys(data))
        prepared_io.save_prepared(data, out / PREPARED_NAME)  # last: its presence marks the dataset complete
        (out / LEGACY_PREPARED).unlink(missing_ok=True)
    sizes = json.loads((out / "dataset" / SIZES_NAME).read_text())
    log.info("dataset %s: %s from %d partition(s)", digest, sizes, len(partitions))
    return {"night": validated["night"], "digest": digest, "dir": str(out), "partitions": partitions,
            "new": validated["valid"], "sizes": sizes, "relevance_changes": str(changes),
            "same_as_production": production_with_digest(cfg, client, digest)}
