"""The night's tagging plan (``plan_tagging``): which partitions are still to discover and their untagged shards,
read from the workspace without torch."""

from __future__ import annotations

import json
import logging

from mavias.core.tagging.shards import missing_shards
from mavias.ops.nightly.artifacts import TagJob, Validated
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import evaluation_partition, layout, pull, s3_client

log = logging.getLogger(__name__)


def is_discovered(cfg: NightlyConfig, partition: str) -> bool:
    """Discovered, and (with an LLM judge) without decisions the offline judge made in the LLM's place."""
    record = layout(cfg).discovery.partition(partition) / "discovery.json"
    if not record.exists():
        return False
    if cfg.discovery.judge != "llm":
        return True
    decisions = json.loads(record.read_text())["counts"].get("decisions_per_class", {})
    return not any(counts.get("fallback") for counts in decisions.values())


def partitions_to_discover(cfg: NightlyConfig, validated: Validated) -> dict[str, str]:
    """Partition -> local manifest, for those not discovered yet: tonight's new ones, once the evaluation set, and
    any processed partition a fresh workspace has not seen."""
    client = s3_client(cfg, "discover")
    todo = {} if is_discovered(cfg, evaluation_partition(cfg)) else {evaluation_partition(cfg): validated["evaluation"]}
    for partition in validated["partitions"]:
        if not is_discovered(cfg, partition):
            todo[partition] = str(pull(cfg, client, partition))
    return todo


def plan_tagging(cfg: NightlyConfig, validated: Validated) -> list[TagJob]:
    """The untagged shards of the partitions to discover, one job each (shards committed earlier are done)."""
    n = cfg.discovery.num_shards
    jobs = [
        {"partition": name, "manifest": path, "shard": index, "num_shards": n}
        for name, path in partitions_to_discover(cfg, validated).items()
        for index in missing_shards(layout(cfg).discovery.tags / name, n)
    ]
    log.info("tagging: %d shard(s) to tag", len(jobs))
    return jobs
