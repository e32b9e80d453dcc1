"""Discover: tag (``tag_shard`` mapped over the shards :mod:`~mavias.ops.nightly.tagging_plan` planned), judge and
encode (``discover``) the partitions not discovered yet, incrementally (:mod:`mavias.core.discovery`).

Tonight's new partitions, once the evaluation set, and any processed partition a fresh workspace has not seen; a
shard committed before (by a killed or earlier attempt) is never tagged again. With ``discovery.judge: llm`` a
partition where the offline judge stood in for the LLM is discovered again on a later night, so the LLM decides the
pairs it missed (its earlier decisions come from the cache); the night's LLM requests are counted across attempts.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from mavias.core.discovery import NothingToDiscover, discover_partition
from mavias.core.encode import TextEncoder, make_encoder
from mavias.core.judging.base import RelevanceJudge
from mavias.core.judging.factory import make_judge
from mavias.core.judging.guards import FileRequestCount, RequestBudget
from mavias.core.manifest import load_manifest
from mavias.core.tagging import Tagger
from mavias.core.tagging.factory import TaggerSettings
from mavias.core.tagging.factory import make_tagger as tagger_from_settings
from mavias.core.tagging.run import TagsStore, tag_partition
from mavias.ops.nightly.artifacts import Discovered, TagBatch, Tagged, TagJob, Validated
from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import layout
from mavias.ops.nightly.tagging_plan import partitions_to_discover
from mavias.ops.nightly.weights import weights_dir

log = logging.getLogger(__name__)

LLM_USAGE_NAME = "llm_requests.json"  # nights/<night>/: the LLM requests the night's discover attempts sent


def make_tagger(cfg: NightlyConfig) -> Tagger:
    """The configured tagger, or a custom one: ``discovery.tagger`` = "package.module:factory"."""
    if ":" in cfg.discovery.tagger:  # a custom tagger: "package.module:factory"
        module, factory = cfg.discovery.tagger.split(":")
        return getattr(importlib.import_module(module), factory)()
    return tagger_from_settings(TaggerSettings(kind=cfg.discovery.tagger, weights_dir=weights_dir(cfg)))


def make_text_encoder(cfg: NightlyConfig) -> TextEncoder:
    """The training config's ``encoder`` (as for ``mavias train``): one setting for discovery and training."""
    return make_encoder(cfg.training.encoder, weights_dir=weights_dir(cfg))


def tag_shards(cfg: NightlyConfig, batch: TagBatch) -> list[Tagged]:
    """Tag a mapped task's shards in turn (:func:`tag_shard`)."""
    return [tag_shard(cfg, job) for job in batch]


def tag_shard(cfg: NightlyConfig, job: TagJob) -> Tagged:
    """Tag one shard of one partition; a shard committed before (by a killed or earlier attempt) is skipped."""
    manifest = Path(job["manifest"])
    counts = tag_partition(
        load_manifest(manifest, check_files=False),
        manifest.parent,
        make_tagger(cfg),
        layout(cfg).discovery.tags / job["partition"],
        shard=(job["shard"], job["num_shards"]),
        store=TagsStore(layout(cfg).discovery.tags),
        batch_size=cfg.discovery.batch_size,
        progress=False,
    )
    log.info("partition %s shard %d/%d: %s", job["partition"], job["shard"], job["num_shards"], counts)
    return {"partition": job["partition"], "shard": job["shard"], **asdict(counts)}


def _night_judge(cfg: NightlyConfig, usage: Path) -> RelevanceJudge:
    """The configured judge; an LLM one with tonight's remaining budget (each request claimed from the count in
    ``usage`` before it is sent, under a lock another attempt shares) and the offline judge to fall back on."""
    settings = cfg.judge_settings()
    if settings.kind != "llm":
        return make_judge(settings)
    count = FileRequestCount(usage)
    budget = RequestBudget.lasting(cfg.discovery.llm_requests_per_night, cfg.discovery.llm_deadline_minutes * 60,
                                   count.spent(), claim=count.claim)
    return make_judge(settings, budget=budget, fall_back=True)


def images_tagged(tagged: Iterable[list[Tagged]]) -> int:
    """The images tonight's shards tagged (the mapped tasks' results), each shard once: after a cleared plan, Airflow
    also hands over results that map indexes of an earlier try left, a shard among them twice."""
    per_shard: dict[tuple[str, int], int] = {}
    for result in (shard for batch in tagged for shard in batch):
        key = (result["partition"], result["shard"])
        per_shard[key] = max(per_shard.get(key, 0), result["images_tagged"])
    return sum(per_shard.values())


def discover(cfg: NightlyConfig, validated: Validated, tagged: Iterable[list[Tagged]] | None) -> Discovered:
    """Judge and encode the partitions to discover (their shards are tagged by now); what tonight cost and who
    decided each (class, tag) pair."""
    totals = {"images_tagged": images_tagged(tagged or []), "llm_requests": 0, "tags_judged": 0, "prompts_encoded": 0}
    decisions: dict[str, Counter[str]] = {}
    failure: str | None = None
    partitions = partitions_to_discover(cfg, validated)
    if partitions:
        usage = layout(cfg).night(validated["night"]) / LLM_USAGE_NAME
        tagger, encoder = make_tagger(cfg), make_text_encoder(cfg)
        judge = _night_judge(cfg, usage)
        for name, manifest in partitions.items():
            try:
                counts = discover_partition(
                    manifest, layout(cfg).discovery.root, tagger, judge, encoder, name=name,
                    num_shards=cfg.discovery.num_shards, batch_size=cfg.discovery.batch_size, progress=False,
                )
            except NothingToDiscover as nothing:  # it adds no image to train on; the others' discovery goes on
                log.warning("%s", nothing)
                continue
            for key in ("llm_requests", "tags_judged", "prompts_encoded"):
                totals[key] += getattr(counts, key)
            for class_name, by_source in counts.decisions_per_class.items():
                decisions.setdefault(class_name, Counter()).update(by_source)
            failure = failure or counts.judge_failure
    log.info("discovery of %s: %s", sorted(partitions) or "nothing new", totals)
    return {"partitions": sorted(partitions), **totals, "judge": cfg.discovery.judge, "judge_failure": failure,
            "decisions": {name: dict(sorted(counts.items())) for name, counts in sorted(decisions.items())}}
