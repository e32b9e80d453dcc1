import shutil

import pandas as pd
import pytest

from mavias.core.manifest import load_manifest
from mavias.core.tagging import ManifestTagger, read_tags
from mavias.core.tagging.openclip import OpenClipTagger
from mavias.core.tagging.run import (
    QUARANTINED,
    REUSED,
    TAGGED,
    TagCounts,
    TagsStore,
    collect_partition,
    tag_partition,
)
from mavias.core.tagging.shards import shard_of, shard_paths
from mavias.errors import UserError


def _manifest(path):
    return load_manifest(path, check_files=False)


def _shard_samples(out_dir, num_shards) -> list[pd.DataFrame]:
    return [pd.read_parquet(shard_paths(out_dir, i, num_shards)[0]) for i in range(num_shards)]


def test_shard_assignment_is_deterministic_disjoint_and_complete():
    ids = [f"{i:016x}" for i in range(1000)]
    shards = [shard_of(s, 4) for s in ids]
    assert shards == [shard_of(s, 4) for s in reversed(ids)][::-1]
    assert set(shards) == {0, 1, 2, 3}
    assert min(shards.count(i) for i in range(4)) > 200


def test_shards_partition_the_manifest_and_union_to_its_tags(scenes_manifest, tmp_path):
    df = _manifest(scenes_manifest)

    counts = tag_partition(df, scenes_manifest.parent, ManifestTagger(), tmp_path, num_shards=3, progress=False)

    assert counts == TagCounts(images_tagged=len(df), shards_done=3)
    shard_ids = [set(samples["sample_id"]) for samples in _shard_samples(tmp_path, 3)]
    assert sum(len(ids) for ids in shard_ids) == len(df)
    assert set.union(*shard_ids) == set(df["sample_id"])
    tags = collect_partition(df, tmp_path, 3)
    expected = df[["sample_id", "tags"]].explode("tags").dropna().rename(columns={"tags": "tag"})
    assert set(map(tuple, tags[["sample_id", "tag"]].values)) == set(map(tuple, expected.values))
    assert (tags["score"] == 1.0).all()
    class_counts = pd.read_parquet(tmp_path / "class_tag_counts.parquet")
    bird_beaks = class_counts.query("`class` == 'bird' and tag == 'beak'")["count"].item()
    assert bird_beaks == sum("beak" in t for t in df.loc[df["label"] == "bird", "tags"])


def test_empty_shards_commit_too(scenes_manifest, tmp_path):
    df = _manifest(scenes_manifest).head(2)
    counts = tag_partition(df, scenes_manifest.parent, ManifestTagger(), tmp_path, num_shards=8, progress=False)
    assert (counts.shards_done, counts.images_tagged) == (8, 2)
    assert set(collect_partition(df, tmp_path, 8)["sample_id"]) == set(df["sample_id"])


def test_a_second_run_skips_committed_shards(scenes_manifest, tmp_path):
    df = _manifest(scenes_manifest)
    tag_partition(df, scenes_manifest.parent, ManifestTagger(), tmp_path, shard=(1, 3), progress=False)

    rerun = tag_partition(df, scenes_manifest.parent, ManifestTagger(), tmp_path, num_shards=3, progress=False)

    assert rerun.shards_skipped == 1 and rerun.shards_done == 2
    assert rerun.images_tagged == sum(shard_of(s, 3) != 1 for s in df["sample_id"])


def test_another_tagger_never_reuses_a_folder(clip, scenes_manifest, vocabulary, vocab_cache, tmp_path):
    df = _manifest(scenes_manifest).head(2)
    tag_partition(df, scenes_manifest.parent, ManifestTagger(), tmp_path, num_shards=1, progress=False)
    other = OpenClipTagger(clip=clip, vocabulary=vocabulary, cache_dir=vocab_cache)
    with pytest.raises(UserError, match="another tagger"):
        tag_partition(df, scenes_manifest.parent, other, tmp_path, num_shards=1, progress=False)


def test_the_manifests_tags_never_overwrite_or_join_another_taggers_shards(clip, scenes_manifest, vocabulary,
                                                                             vocab_cache, tmp_path):
    """The other order than above: OpenCLIP's shard first, then the manifest's tags (which differ from it, so they
    would be read again there), and a folder of mixed shards is never merged into one table."""
    df = _manifest(scenes_manifest).head(6)
    other = OpenClipTagger(clip=clip, vocabulary=vocabulary, cache_dir=vocab_cache)
    tag_partition(df, scenes_manifest.parent, other, tmp_path, shard=(0, 2), progress=False)
    with pytest.raises(UserError, match="another tagger"):
        tag_partition(df, scenes_manifest.parent, ManifestTagger(), tmp_path, num_shards=2, progress=False)
    tag_partition(df, scenes_manifest.parent, ManifestTagger(), tmp_path, shard=(1, 2), progress=False)  # a gap
    with pytest.raises(UserError, match="holds tags of 2 taggers"):
        collect_partition(df, tmp_path, 2)


def test_images_seen_in_earlier_partitions_are_not_tagged_again(scenes_manifest, tmp_path):
    df = _manifest(scenes_manifest)
    first, second = df.iloc[:20], df.iloc[10:]
    store = TagsStore(tmp_path)
    options = {"num_shards": 2, "store": store, "progress": False}
    tag_partition(first, scenes_manifest.parent, ManifestTagger(), tmp_path / "p1", **options)

    counts = tag_partition(second, scenes_manifest.parent, ManifestTagger(), tmp_path / "p2", **options)

    assert (counts.images_tagged, counts.images_reused) == (len(df) - 20, 10)
    statuses = pd.concat(_shard_samples(tmp_path / "p2", 2)).set_index("sample_id")["status"]
    assert (statuses.loc[df["sample_id"].iloc[10:20]] == REUSED).all()
    assert (statuses.loc[df["sample_id"].iloc[20:]] == TAGGED).all()
    assert set(collect_partition(second, tmp_path / "p2", 2)["sample_id"]) == set(second["sample_id"])


def test_openclip_tagging_with_workers_quarantines_broken_images(
    clip, scenes_manifest, vocabulary, vocab_cache, tmp_path
):
    images = tmp_path / "data"
    shutil.copytree(scenes_manifest.parent / "images", images / "images")
    df = _manifest(scenes_manifest).head(6).copy()
    (images / df["uri"].iloc[0]).write_bytes(b"not a png")
    (images / df["uri"].iloc[1]).unlink()
    tagger = OpenClipTagger(clip=clip, vocabulary=vocabulary, threshold=0.0, top_k=3, cache_dir=vocab_cache)

    counts = tag_partition(
        df, images, tagger, tmp_path / "out", num_shards=2, batch_size=2, num_workers=1, progress=False
    )

    assert (counts.images_tagged, counts.images_quarantined) == (4, 2)
    tags = collect_partition(df, tmp_path / "out", 2)
    assert tags.groupby("sample_id").size().to_dict() == {s: 3 for s in df["sample_id"].iloc[2:]}
    assert str(tags["score"].dtype) == "float32"
    quarantine = pd.read_csv(tmp_path / "out" / "quarantine.csv").set_index("sample_id")["reason"]
    assert quarantine.loc[df["sample_id"].iloc[0]].startswith("cannot decode")
    assert quarantine.loc[df["sample_id"].iloc[1]] == "file not found"
    samples = pd.concat(_shard_samples(tmp_path / "out", 2))
    assert (samples["status"] == QUARANTINED).sum() == 2
    assert read_tags(tmp_path / "out" / "tags.parquet").equals(tags)
