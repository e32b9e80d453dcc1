"""Incremental discovery of a partition: tag -> judge -> encode over an accumulating workspace.

Workspace layout (shared by all partitions)::

    tags/<partition>/        shard outputs, tags.parquet, class_tag_counts.parquet (a TagsStore over tags/)
    judging/decisions.sqlite the judge's persistent decision cache
    embeddings/<encoder>/    EmbeddingStore of bias prompts, one per encoder
    partitions/<partition>/  relevance.parquet, discovery.json

A partition only costs what is new: images never tagged by this tagger, (class, tag) pairs never judged by this
judge, and tag sets never encoded by this encoder. Re-running a partition costs nothing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from mavias.core.encode import EmbeddingStore, TextEncoder, bias_embeddings
from mavias.core.judging.base import RelevanceJudge
from mavias.core.judging.cache import DecisionCache, DecisionTally, decide_all
from mavias.core.judging.review import ReviewedDecisions
from mavias.core.manifest import MANIFEST_NAME, load_manifest
from mavias.core.relevance import save_relevance
from mavias.core.tagging.base import Tagger, tag_lists
from mavias.core.tagging.run import (
    DEFAULT_NUM_SHARDS,
    QUARANTINED,
    TAGS_NAME,
    TagCounts,
    TagsStore,
    collect_partition,
    shard_samples,
    tag_partition,
)
from mavias.core.tagging.shards import samples_digest
from mavias.errors import UserError
from mavias.utils.atomic import write_json

RELEVANCE_NAME = "relevance.parquet"


@dataclass
class DiscoveryCounts:
    images: int = 0
    images_tagged: int = 0  # images the tagger looked at
    images_reused: int = 0  # tags copied from an earlier partition (same image content)
    images_quarantined: int = 0
    llm_requests: int = 0  # judge calls (batches sent to the configured judge)
    tags_judged: int = 0  # (class, tag) pairs the configured judge decided
    prompts_encoded: int = 0  # tag sets sent to the text encoder
    distinct_prompts: int = 0
    llm_requests_per_class: dict[str, int] = field(default_factory=dict)
    decisions_per_class: dict[str, dict[str, int]] = field(default_factory=dict)  # class -> source -> pairs
    judge_failure: str | None = None  # why the offline judge stood in for the LLM judge (GuardedJudge.failure)


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def tags(self) -> Path:
        return self.root / "tags"

    @property
    def decisions(self) -> Path:
        return self.root / "judging" / "decisions.sqlite"

    def embeddings(self, encoder_id: str) -> Path:
        """One embedding store per encoder: stores hold vectors of a single dimension."""
        return self.root / "embeddings" / re.sub(r"[^A-Za-z0-9._-]+", "_", encoder_id)

    def partition(self, name: str) -> Path:
        return self.root / "partitions" / name

    def tags_table(self, name: str) -> Path:
        """A partition's tags table (``mavias train --tags``)."""
        return self.tags / name / TAGS_NAME

    def relevance(self, name: str) -> Path:
        """A partition's relevance table (``mavias train --relevance``)."""
        return self.partition(name) / RELEVANCE_NAME

    def judged_classes(self) -> set[str]:
        """Every class an earlier partition's relevance table decides."""
        tables = sorted((self.root / "partitions").glob(f"*/{RELEVANCE_NAME}"))
        return {str(name) for table in tables for name in pd.read_parquet(table, columns=["class"])["class"].unique()}


def manifest_file(partition: str | Path) -> Path:
    """A partition folder holding ``manifest.parquet``, or a manifest file."""
    path = Path(partition)
    return path / MANIFEST_NAME if path.is_dir() else path


def partition_name(partition: str | Path, name: str | None = None) -> str:
    """``name``, else the manifest's folder name: one plain folder name of the workspace."""
    chosen = name or Path(os.path.abspath(manifest_file(partition))).parent.name  # '..' folded, links kept
    if chosen in ("", ".", "..") or any(char in chosen for char in "/\\\0"):
        raise UserError(f"partition name {chosen!r} cannot name a folder of the workspace",
                        hint="pass --name with a plain name (letters, digits, '-', '_', '.')")
    return chosen


def _check_same_partition(record: Path, manifest_path: Path, df: pd.DataFrame, name: str) -> None:
    """A partition named after its folder must not take the place of another folder's of the same name."""
    try:
        earlier = json.loads(record.read_text())
    except (OSError, ValueError):
        return
    elsewhere = Path(str(earlier.get("partition", manifest_path))).resolve() != manifest_path.resolve()
    if elsewhere and earlier.get("samples") != samples_digest(df):
        raise UserError(f"the workspace's partition {name!r} was discovered from {earlier['partition']}, another "
                        f"manifest than {manifest_path}", hint="pass --name to discover this one under its own name")


class NothingToDiscover(UserError):
    """A partition whose every image was quarantined: nothing to judge or encode."""


def _tag(
    df: pd.DataFrame, manifest_dir: Path, tagger: Tagger, tag_dir: Path, store: TagsStore, num_shards: int, **loader
) -> tuple[TagCounts, pd.DataFrame, pd.Series]:
    """Tag what is new; return the counts, the decodable samples and their tag lists."""
    counts = tag_partition(df, manifest_dir, tagger, tag_dir, num_shards=num_shards, store=store, **loader)
    tags = collect_partition(df, tag_dir, num_shards)
    samples = shard_samples(tag_dir, num_shards, df["sample_id"])
    usable = df[~df["sample_id"].isin(samples.loc[samples["status"] == QUARANTINED, "sample_id"])]
    return counts, usable, tag_lists(tags, usable["sample_id"]).set_axis(usable.index)


def _judge(
    labels: pd.Series, sample_tags: pd.Series, judge: RelevanceJudge, cache_path: Path,
    review: ReviewedDecisions | None, tally: DecisionTally, known_classes: set[str],
) -> pd.DataFrame:
    """The relevance table of every (class, tag) pair of the partition; only undecided pairs reach the judge, which
    reads the partition's classes together with those of the workspace's earlier partitions."""
    pairs = pd.DataFrame({"class": labels, "tag": sample_tags}).explode("tag").dropna()
    with DecisionCache(cache_path) as cache:
        return decide_all(judge, pairs.groupby("class")["tag"].agg(set).to_dict(), cache, review, tally=tally,
                          classes=known_classes | set(labels))


def discover_partition(
    partition: str | Path,
    workspace: str | Path,
    tagger: Tagger,
    judge: RelevanceJudge,
    encoder: TextEncoder,
    *,
    name: str | None = None,
    review: ReviewedDecisions | None = None,
    num_shards: int = DEFAULT_NUM_SHARDS,
    batch_size: int = 32,
    num_workers: int = 0,
    progress: bool = True,
) -> DiscoveryCounts:
    """Tag, judge and encode one partition (named after its folder unless ``name`` is given).

    ``review`` holds human-reviewed verdicts, which win over the judge's.
    """
    manifest_path, given_name = manifest_file(partition), name
    name = partition_name(partition, name)
    ws = Workspace(Path(workspace))
    df = load_manifest(manifest_path, check_files=False)  # missing images are quarantined by the tagging step
    out = ws.partition(name)
    if given_name is None:
        _check_same_partition(out / "discovery.json", manifest_path, df, name)

    tagged, usable, sample_tags = _tag(
        df, manifest_path.parent, tagger, ws.tags / name, TagsStore(ws.tags), num_shards,
        batch_size=batch_size, num_workers=num_workers, progress=progress,
    )  # fmt: skip
    if usable.empty:
        raise NothingToDiscover(f"every one of the {len(df)} image(s) of {name} was quarantined (missing or "
                                "unreadable): nothing to judge or encode",
                                hint=f"check the images the manifest {manifest_path} names, then discover it again")
    tally = DecisionTally()
    relevance = _judge(usable["label"], sample_tags, judge, ws.decisions, review, tally, ws.judged_classes())
    save_relevance(relevance, ws.relevance(name))
    embedded = bias_embeddings(usable["label"], sample_tags, relevance, encoder,
                               EmbeddingStore(ws.embeddings(encoder.encoder_id)))

    counts = DiscoveryCounts(
        images=len(df),
        images_tagged=tagged.images_tagged,
        images_reused=tagged.images_reused,
        images_quarantined=tagged.images_quarantined,
        llm_requests=sum(tally.calls.values()),
        tags_judged=tally.total("judge"),
        prompts_encoded=embedded.encoded,
        distinct_prompts=embedded.distinct_prompts,
        llm_requests_per_class=dict(sorted(tally.calls.items())),
        decisions_per_class=tally.by_class(),
        judge_failure=getattr(judge, "failure", None),
    )
    write_json(out / "discovery.json", {"partition": str(manifest_path.resolve()), "samples": samples_digest(df),
                                        "counts": asdict(counts)})
    return counts
