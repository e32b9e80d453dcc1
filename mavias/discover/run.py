"""Incremental discovery of a partition: tag -> judge -> encode over an accumulating workspace.

Workspace layout (shared by all partitions)::

    tags/<partition>/        shard outputs, tags.parquet, class_tag_counts.parquet (a TagsStore over tags/)
    judging/decisions.sqlite the judge's persistent decision cache
    embeddings/              EmbeddingStore of bias prompts
    partitions/<partition>/  relevance.parquet, sample_embeddings.parquet, discovery.json

A partition only costs what is new: images never tagged by this tagger, (class, tag) pairs never judged by this
judge, and tag sets never encoded by this encoder. Re-running a partition costs nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from mavias.discover.counting import CountingJudge
from mavias.encode.base import TextEncoder
from mavias.encode.samples import encode_samples, save_sample_embeddings
from mavias.encode.store import EmbeddingStore
from mavias.judging.base import RelevanceJudge
from mavias.judging.cache import DecisionCache, decide_all
from mavias.judging.review import ReviewedDecisions
from mavias.manifest import load_manifest
from mavias.relevance import irrelevant_tags, save_relevance
from mavias.tagging.base import Tagger, tag_lists
from mavias.tagging.run import DEFAULT_NUM_SHARDS, QUARANTINED, TagsStore, collect_partition, shard_samples, tag_partition
from mavias.utils.atomic import write_json

MANIFEST_NAME = "manifest.parquet"


@dataclass
class DiscoveryCounts:
    images: int = 0
    images_tagged: int = 0  # images the tagger looked at
    images_reused: int = 0  # tags copied from an earlier partition (same image content)
    images_quarantined: int = 0
    llm_requests: int = 0  # judge calls
    tags_judged: int = 0  # (class, tag) pairs sent to the judge
    prompts_encoded: int = 0  # tag sets sent to the text encoder
    distinct_prompts: int = 0
    llm_requests_per_class: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def tags(self) -> Path:
        return self.root / "tags"

    @property
    def decisions(self) -> Path:
        return self.root / "judging" / "decisions.sqlite"

    @property
    def embeddings(self) -> Path:
        return self.root / "embeddings"

    def partition(self, name: str) -> Path:
        return self.root / "partitions" / name


def resolve_manifest(partition: str | Path) -> Path:
    """A partition folder holding ``manifest.parquet``, or a manifest file."""
    path = Path(partition)
    return path / MANIFEST_NAME if path.is_dir() else path


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
    manifest_path = resolve_manifest(partition)
    name = name or manifest_path.parent.name
    ws = Workspace(Path(workspace))
    df = load_manifest(manifest_path, check_files=False)  # missing images are quarantined by the tagging step

    tag_dir = ws.tags / name
    tagged = tag_partition(
        df,
        manifest_path.parent,
        tagger,
        tag_dir,
        num_shards=num_shards,
        store=TagsStore(ws.tags),
        batch_size=batch_size,
        num_workers=num_workers,
        progress=progress,
    )
    tags = collect_partition(df, tag_dir, num_shards)
    samples = shard_samples(tag_dir, num_shards)
    usable = df[~df["sample_id"].isin(samples.loc[samples["status"] == QUARANTINED, "sample_id"])]
    sample_tags = tag_lists(tags, usable["sample_id"]).set_axis(usable.index)

    counting = CountingJudge(judge)
    tags_by_class = pd.DataFrame({"class": usable["label"], "tag": sample_tags}).explode("tag").dropna()
    with DecisionCache(ws.decisions) as cache:
        relevance = decide_all(counting, tags_by_class.groupby("class")["tag"].agg(set).to_dict(), cache, review)
    out = ws.partition(name)
    save_relevance(relevance, out / "relevance.parquet")

    bias_tags = irrelevant_tags(usable["label"], sample_tags, relevance)
    keys, n_encoded = encode_samples(usable["sample_id"], bias_tags, encoder, EmbeddingStore(ws.embeddings))
    save_sample_embeddings(keys, out / "sample_embeddings.parquet")

    counts = DiscoveryCounts(
        images=len(df),
        images_tagged=tagged.images_tagged,
        images_reused=tagged.images_reused,
        images_quarantined=int((samples["status"] == QUARANTINED).sum()),
        llm_requests=sum(counting.requests.values()),
        tags_judged=sum(counting.tags_judged.values()),
        prompts_encoded=n_encoded,
        distinct_prompts=keys["key"].nunique(),
        llm_requests_per_class=dict(sorted(counting.requests.items())),
    )
    write_json(out / "discovery.json", {"partition": str(manifest_path), "counts": asdict(counts)})
    return counts
