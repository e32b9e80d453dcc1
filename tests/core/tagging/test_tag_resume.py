import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mavias
from mavias.core.manifest import load_manifest
from mavias.core.tagging.openclip import OpenClipTagger
from mavias.core.tagging.run import TagsStore, collect_partition, tag_partition
from mavias.core.tagging.shards import missing_shards, shard_of

NUM_SHARDS = 6
REPO_ROOT = Path(mavias.__file__).resolve().parents[1]


def _wait_for_first_commit(out: Path, proc: subprocess.Popen, log: Path, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(out.glob("tags-shard-*.parquet")):
        assert proc.poll() is None, f"tagging exited early:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no shard committed in time"
        time.sleep(0.01)


def test_a_killed_run_resumes_without_redoing_committed_shards(
    clip, scenes_manifest, vocabulary, vocab_cache, tmp_path
):
    vocab_file = tmp_path / "vocabulary.txt"
    vocab_file.write_text("\n".join(vocabulary) + "\n")
    out = tmp_path / "tags"
    command = [
        sys.executable, "-m", "mavias.cli", "tag",
        "--manifest", str(scenes_manifest), "--out", str(out),
        "--tagger", "openclip", "--tagger-model", clip.model_name, "--pretrained", "none", "--device", "cpu",
        "--vocabulary", str(vocab_file), "--threshold", "0", "--top-k", "3", "--cache-dir", str(vocab_cache),
        "--num-shards", str(NUM_SHARDS), "--batch-size", "1", "--workers", "0",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    log = tmp_path / "cli.log"
    with open(log, "w") as log_file:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            _wait_for_first_commit(out, proc, log)
        finally:
            proc.kill()
            proc.wait()
    committed = {p.name: p.stat().st_mtime_ns for p in out.glob("tags-shard-*.parquet")}
    assert 1 <= len(committed) < NUM_SHARDS, "the run was not killed mid-way"

    df = load_manifest(scenes_manifest, check_files=False)
    tagger = OpenClipTagger(clip=clip, vocabulary=vocabulary, threshold=0.0, top_k=3, cache_dir=vocab_cache)
    counts = tag_partition(df, scenes_manifest.parent, tagger, out, num_shards=NUM_SHARDS, progress=False)

    done_before = {int(name.split("-")[2]) for name in committed}
    assert (counts.shards_skipped, counts.shards_done) == (len(committed), NUM_SHARDS - len(committed))
    assert counts.images_tagged == sum(shard_of(s, NUM_SHARDS) not in done_before for s in df["sample_id"])
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("tags-shard-*.parquet") if p.name in committed} == committed
    tags = collect_partition(df, out, NUM_SHARDS)
    assert tags.groupby("sample_id").size().to_dict() == {s: 3 for s in df["sample_id"]}


def test_a_partition_delivered_again_with_more_images_gets_them_tagged(
    clip, scenes_manifest, vocabulary, vocab_cache, tmp_path
):
    df = load_manifest(scenes_manifest, check_files=False)
    first = df.iloc[: len(df) // 2]
    tagger = OpenClipTagger(clip=clip, vocabulary=vocabulary, threshold=0.0, top_k=3, cache_dir=vocab_cache)
    out, store = tmp_path / "tags" / "p1", TagsStore(tmp_path / "tags")
    tag_partition(first, scenes_manifest.parent, tagger, out, num_shards=NUM_SHARDS, store=store, progress=False)
    assert missing_shards(out, NUM_SHARDS) == [] and missing_shards(out, NUM_SHARDS, df["sample_id"]) != []
    with pytest.raises(RuntimeError, match="not tagged yet for these samples"):  # never the first delivery's tags
        collect_partition(df, out, NUM_SHARDS)

    again = tag_partition(df, scenes_manifest.parent, tagger, out, num_shards=NUM_SHARDS, store=store, progress=False)
    assert again.images_tagged == len(df) - len(first) and 0 < again.images_reused <= len(first)  # only the new
    assert missing_shards(out, NUM_SHARDS, df["sample_id"]) == []
    tags = collect_partition(df, out, NUM_SHARDS)
    assert tags.groupby("sample_id").size().to_dict() == {s: 3 for s in df["sample_id"]}
