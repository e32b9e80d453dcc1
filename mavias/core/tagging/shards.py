"""A partition's shards: which shard a sample falls in and where a shard's files are, readable without torch (the
night plans its tagging jobs from them)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from mavias.errors import UserError


def shard_of(sample_id: str, num_shards: int) -> int:
    """Deterministic shard of a sample: independent of row order, stable across runs and machines."""
    return int(hashlib.sha256(sample_id.encode()).hexdigest()[:8], 16) % num_shards


def shard_paths(out_dir: Path, index: int, num_shards: int) -> tuple[Path, Path]:
    """(samples file, tags file) of one shard."""
    name = f"shard-{index:03d}-of-{num_shards:03d}.parquet"
    return out_dir / f"samples-{name}", out_dir / f"tags-{name}"


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' -> (i, n) with 0 <= i < n."""
    try:
        index, num_shards = (int(part) for part in text.split("/"))
    except ValueError:
        raise UserError(f"--shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if not 0 <= index < num_shards:
        raise UserError(f"--shard {text!r}: the shard i of n needs 0 <= i < n (shards count from 0, e.g. 0/4 to 3/4)")
    return index, num_shards


def missing_shards(out_dir: str | Path, num_shards: int, sample_ids: Iterable[str] | None = None) -> list[int]:
    """The shards not committed, and with ``sample_ids`` (the partition's manifest) those committed for other samples
    (a partition delivered again with other images under its name): all of them are to tag."""
    out_dir = Path(out_dir)
    committed = [i for i in range(num_shards) if shard_paths(out_dir, i, num_shards)[1].exists()]
    if sample_ids is not None:
        wanted: dict[int, set[str]] = {i: set() for i in range(num_shards)}
        for sample_id in sample_ids:
            wanted[shard_of(sample_id, num_shards)].add(sample_id)
        committed = [i for i in committed if _shard_sample_ids(out_dir, i, num_shards) == wanted[i]]
    return [i for i in range(num_shards) if i not in committed]


def _shard_sample_ids(out_dir: Path, index: int, num_shards: int) -> set[str]:
    samples = shard_paths(out_dir, index, num_shards)[0]
    return set(pd.read_parquet(samples, columns=["sample_id"])["sample_id"]) if samples.exists() else set()


def samples_digest(manifest: pd.DataFrame) -> str:
    """What a partition held when it was discovered (its ``discovery.json`` keeps it): its samples, each with its label
    and the tags it came with, so that a delivery correcting either is discovered again."""
    tags = manifest["tags"].map(lambda cell: ",".join(sorted(cell))) if "tags" in manifest.columns else ""
    rows = manifest["sample_id"].astype(str) + "\t" + manifest["label"].astype(str) + "\t" + tags
    return hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:16]
