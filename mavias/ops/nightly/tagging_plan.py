"""The night's tagging plan (``plan_tagging``): which partitions are still to discover and their untagged shards,
read from the workspace without torch."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mavias.core.manifest import load_manifest
from mavias.core.tagging.shards import missing_shards, samples_digest
from mavias.ops.nightly.artifacts import TagBatch, TagJob, Validated
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.incoming import MANIFEST_NAMES
from mavias.ops.nightly.layout import evaluation_partition, layout, pull, s3_client

log = logging.getLogger(__name__)

# Airflow refuses to map a task over more items than [core] max_map_length (1024 by default): a backlog of shards (a
# first night on a bucket of many partitions) is dealt into this many mapped tasks instead
MAX_MAPPED_TASKS = 1024


def is_discovered(cfg: NightlyConfig, partition: str, manifest: Path) -> bool:
    """Discovered with the samples, labels and tags its manifest holds now (not an earlier delivery under its name),
    and (with an LLM judge) without decisions the offline judge made in the LLM's place. A record that cannot be read
    is discovered again; one from before records kept their samples is checked against the partition's tag shards."""
    record = layout(cfg).discovery.partition(partition) / "discovery.json"
    if not record.exists():
        return False
    try:
        document = json.loads(record.read_text())
        decisions = document["counts"].get("decisions_per_class", {})
        fallback = any(counts.get("fallback") for counts in decisions.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    samples = load_manifest(manifest, check_files=False)
    if "samples" in document:
        same = document["samples"] == samples_digest(samples)
    else:
        tags_dir = layout(cfg).discovery.tags / partition
        same = not missing_shards(tags_dir, cfg.discovery.num_shards, samples["sample_id"])
    return same and not (cfg.discovery.judge == "llm" and fallback)


def _sample_ids(manifest: Path) -> list[str]:
    return load_manifest(manifest, check_files=False)["sample_id"].tolist()


def _local_manifest(cfg: NightlyConfig, partition: str) -> Path | None:
    """The partition's manifest as an earlier night (or tonight's validation) pulled it, if the workspace holds it."""
    folder = layout(cfg).partition(partition)
    return next((folder / name for name in MANIFEST_NAMES if (folder / name).is_file()), None)


def partitions_to_discover(cfg: NightlyConfig, validated: Validated) -> dict[str, str]:
    """Partition -> local manifest, for those not discovered yet: tonight's new ones, once the evaluation set, any
    processed partition a fresh workspace has not seen, and one delivered again with other images. Tonight's are
    read as validated (pulled again: their files are local by now), earlier ones as the workspace holds them."""
    evaluation, todo = Path(validated["evaluation"]), {}
    if not is_discovered(cfg, evaluation_partition(cfg), evaluation):
        todo[evaluation_partition(cfg)] = str(evaluation)
    client = None
    for partition in validated["partitions"]:
        manifest = None if partition in validated["valid"] else _local_manifest(cfg, partition)
        if manifest is None:
            client = client or s3_client(cfg, "discover")
            manifest = pull(cfg, client, partition)
        if not is_discovered(cfg, partition, manifest):
            todo[partition] = str(manifest)
    return todo


def plan_tagging(cfg: NightlyConfig, validated: Validated) -> list[TagBatch]:
    """The untagged shards of the partitions to discover (shards committed earlier are done), one per mapped task,
    or dealt in turn into ``MAX_MAPPED_TASKS`` tasks when there are more."""
    n = cfg.discovery.num_shards
    jobs = [
        {"partition": name, "manifest": path, "shard": index, "num_shards": n}
        for name, path in partitions_to_discover(cfg, validated).items()
        for index in missing_shards(layout(cfg).discovery.tags / name, n, _sample_ids(Path(path)))
    ]
    batches = deal(jobs, MAX_MAPPED_TASKS)
    log.info("tagging: %d shard(s) to tag in %d task(s)", len(jobs), len(batches))
    return batches


def deal(jobs: list[TagJob], tasks: int) -> list[TagBatch]:
    """``jobs`` one per task, or dealt in turn into ``tasks`` batches when there are more."""
    tasks = min(len(jobs), tasks)
    return [jobs[first::tasks] for first in range(tasks)]
