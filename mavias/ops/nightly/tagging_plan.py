"""The night's tagging plan (``plan_tagging``): which partitions are still to discover and their untagged shards,
read from the workspace without torch."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mavias.core.manifest import load_manifest
from mavias.core.tagging.shards import missing_shards, samples_digest
from mavias.ops.nightly.artifacts import TagJob, Validated
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import evaluation_partition, layout, pull, s3_client

log = logging.getLogger(__name__)


def is_discovered(cfg: NightlyConfig, partition: str, manifest: Path) -> bool:
    """Discovered with the samples its manifest holds now (not an earlier delivery under its name), and (with an LLM
    judge) without decisions the offline judge made in the LLM's place."""
    record = layout(cfg).discovery.partition(partition) / "discovery.json"
    if not record.exists():
        return False
    document = json.loads(record.read_text())
    if document.get("samples") != samples_digest(_sample_ids(manifest)):
        return False
    if cfg.discovery.judge != "llm":
        return True
    decisions = document["counts"].get("decisions_per_class", {})
    return not any(counts.get("fallback") for counts in decisions.values())


def _sample_ids(manifest: Path) -> list[str]:
    return load_manifest(manifest, check_files=False)["sample_id"].tolist()


def partitions_to_discover(cfg: NightlyConfig, validated: Validated) -> dict[str, str]:
    """Partition -> local manifest, for those not discovered yet: tonight's new ones, once the evaluation set, any
    processed partition a fresh workspace has not seen, and one delivered again with other images."""
    client = s3_client(cfg, "discover")
    manifests = {evaluation_partition(cfg): Path(validated["evaluation"])}
    manifests |= {partition: pull(cfg, client, partition) for partition in validated["partitions"]}
    return {name: str(path) for name, path in manifests.items() if not is_discovered(cfg, name, path)}


def plan_tagging(cfg: NightlyConfig, validated: Validated) -> list[TagJob]:
    """The untagged shards of the partitions to discover, one job each (shards committed earlier are done)."""
    n = cfg.discovery.num_shards
    jobs = [
        {"partition": name, "manifest": path, "shard": index, "num_shards": n}
        for name, path in partitions_to_discover(cfg, validated).items()
        for index in missing_shards(layout(cfg).discovery.tags / name, n, _sample_ids(Path(path)))
    ]
    log.info("tagging: %d shard(s) to tag", len(jobs))
    return jobs
