"""Tag a partition shard by shard: deterministic shards, atomic per-shard commits, resumable and incremental.

Output folder of a partition::

    samples-shard-003-of-008.parquet   sample_id, tagger_id, status (tagged | reused | quarantined), reason
    tags-shard-003-of-008.parquet      tags table of the shard; written last, so its presence commits the shard
    tags.parquet, class_tag_counts.parquet, quarantine.csv   written by collect_partition once all shards exist

Several workers may each run one shard (``shard=(i, n)``) of the same partition at once: they share no file.
A :class:`TagsStore` over the output folders of earlier partitions lets a shard copy the tags of images it has
already seen (same content id, same tagger) instead of tagging them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

import pandas as pd
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from mavias.core.manifest import resolve_uri
from mavias.core.manifest.quarantine import QUARANTINE_COLUMNS, decode_problem, is_machine_read_fault
from mavias.core.tagging.base import (
    TagBatch,
    Tagger,
    class_tag_counts,
    empty_tags_table,
    read_tags,
    tag_lists,
    tags_table,
    write_tags,
)
from mavias.core.tagging.defaults import DEFAULT_NUM_SHARDS
from mavias.core.tagging.shards import missing_shards, shard_of, shard_paths
from mavias.errors import UserError
from mavias.utils.atomic import atomic_path
from mavias.utils.csvfile import write_csv
from mavias.utils.progress import progress_bar

TAGS_NAME = "tags.parquet"
CLASS_TAG_COUNTS_NAME = "class_tag_counts.parquet"
QUARANTINE_NAME = "quarantine.csv"
SAMPLES_COLUMNS = ["sample_id", "tagger_id", "status", "reason"]
TAGGED, REUSED, QUARANTINED = "tagged", "reused", "quarantined"


@dataclass
class TagCounts:
    images_tagged: int = 0  # images the tagger looked at in this run
    images_reused: int = 0  # images whose tags were copied from an earlier partition
    images_quarantined: int = 0
    shards_done: int = 0  # shards committed in this run
    shards_skipped: int = 0  # shards already committed by an earlier run

    def __add__(self, other: TagCounts) -> TagCounts:
        return TagCounts(*(a + b for a, b in zip(astuple(self), astuple(other))))


class TagsStore:
    """The committed shard outputs of every partition folder under ``root`` (``root/<partition>/...``)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _committed(self) -> Iterator[tuple[Path, Path]]:
        for samples_path in sorted(self.root.glob("*/samples-shard-*.parquet")):
            tags_path = samples_path.with_name("tags-" + samples_path.name.removeprefix("samples-"))
            if tags_path.exists():
                yield samples_path, tags_path

    def lookup(self, tagger_id: str, sample_ids: Sequence[str]) -> tuple[set[str], pd.DataFrame]:
        """(ids among ``sample_ids`` already tagged by ``tagger_id``, their tags)."""
        wanted, known, parts = set(sample_ids), set(), [empty_tags_table()]
        for samples_path, tags_path in self._committed():
            samples = pd.read_parquet(samples_path)
            done = samples["status"].isin([TAGGED, REUSED]) & (samples["tagger_id"] == tagger_id)
            found = (set(samples.loc[done, "sample_id"]) & wanted) - known
            if found:
                tags = read_tags(tags_path)
                parts.append(tags[tags["sample_id"].isin(found)])
                known |= found
        return known, pd.concat(parts, ignore_index=True)


@dataclass(frozen=True)
class _LoaderOptions:
    batch_size: int
    num_workers: int
    progress: bool


class _ImageDataset(Dataset):
    def __init__(self, paths: list[Path], preprocess):
        self.paths = paths
        self.preprocess = preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor | None, str | None]:
        try:
            with Image.open(self.paths[i]) as img:
                return i, self.preprocess(img.convert("RGB")), None
        except Exception as err:  # any undecodable image is quarantined with its reason, never a crash
            if is_machine_read_fault(err):  # the machine's (EIO, too many open files): the shard fails and is retried
                raise
            return i, None, decode_problem(self.paths[i]) or f"cannot preprocess: {type(err).__name__}: {err}"


def _collate(items) -> tuple[list[int], torch.Tensor | None, list[tuple[int, str]]]:
    ok = [(i, x) for i, x, _ in items if x is not None]
    failed = [(i, reason) for i, x, reason in items if x is None]
    return [i for i, _ in ok], (torch.stack([x for _, x in ok]) if ok else None), failed


def _batches(
    rows: pd.DataFrame, manifest_dir: Path, tagger: Tagger, options: _LoaderOptions
) -> Iterator[tuple[TagBatch, dict[str, str]]]:
    """(batch of decodable rows, {sample_id: reason} of the undecodable ones) in order."""
    if tagger.preprocess is None:
        for start in range(0, len(rows), options.batch_size):
            yield TagBatch(rows.iloc[start : start + options.batch_size], None), {}
        return
    dataset = _ImageDataset([resolve_uri(manifest_dir, u) for u in rows["uri"]], tagger.preprocess)
    loader = DataLoader(
        dataset,
        batch_size=options.batch_size,
        num_workers=options.num_workers,
        collate_fn=_collate,
        pin_memory=torch.cuda.is_available(),
    )
    for positions, images, failed in loader:
        failures = {rows["sample_id"].iloc[i]: reason for i, reason in failed}
        yield TagBatch(rows.iloc[positions], images), failures


def _run_tagger(
    rows: pd.DataFrame, manifest_dir: Path, tagger: Tagger, options: _LoaderOptions
) -> tuple[pd.DataFrame, dict[str, str]]:
    parts, failures = [empty_tags_table()], {}
    with progress_bar(total=len(rows), unit="img", desc="tagging", enabled=options.progress) as bar:
        for batch, failed in _batches(rows, manifest_dir, tagger, options):
            if len(batch.rows):
                parts.append(tags_table(batch.rows["sample_id"].tolist(), tagger.tag(batch)))
            failures.update(failed)
            bar.update(len(batch.rows) + len(failed))
    return pd.concat(parts, ignore_index=True), failures


def _check_tagger(samples_path: Path, tagger_id: str) -> None:
    found = set(pd.read_parquet(samples_path, columns=["tagger_id"])["tagger_id"])
    if found - {tagger_id}:
        raise UserError(
            f"{samples_path.parent} holds tags of another tagger ({sorted(found)}), not {tagger_id}: "
            "write each tagger's output to its own folder"
        )


def _tag_shard(
    rows: pd.DataFrame,
    manifest_dir: Path,
    tagger: Tagger,
    paths: tuple[Path, Path],
    known: set[str],
    reused: pd.DataFrame,
    loader: _LoaderOptions,
) -> TagCounts:
    """Tag the rows not in ``known`` (whose tags ``reused`` holds), then commit the shard: samples first, tags last."""
    todo = rows[~rows["sample_id"].isin(known)]
    new_tags, failures = _run_tagger(todo, manifest_dir, tagger, loader)
    ids = rows["sample_id"].tolist()
    samples = pd.DataFrame(
        {
            "sample_id": ids,
            "tagger_id": tagger.tagger_id,
            "status": [REUSED if s in known else QUARANTINED if s in failures else TAGGED for s in ids],
            "reason": [failures.get(s) for s in ids],
        },
        columns=SAMPLES_COLUMNS,
    )
    samples_path, tags_path = paths
    tags_path.unlink(missing_ok=True)  # a shard tagged again (other samples): uncommitted until its new tags land
    with atomic_path(samples_path) as tmp:
        samples.to_parquet(tmp, index=False)
    write_tags(pd.concat([reused, new_tags], ignore_index=True), tags_path)  # the commit
    return TagCounts(
        images_tagged=len(todo) - len(failures),
        images_reused=len(rows) - len(todo),
        images_quarantined=len(failures),
        shards_done=1,
    )


def tag_partition(
    manifest_df: pd.DataFrame,
    manifest_dir: str | Path,
    tagger: Tagger,
    out_dir: str | Path,
    *,
    shard: tuple[int, int] | None = None,
    num_shards: int = DEFAULT_NUM_SHARDS,
    store: TagsStore | None = None,
    batch_size: int = 32,
    num_workers: int = 0,
    progress: bool = True,
) -> TagCounts:
    """Tag one shard ``(i, n)`` of a partition, or all ``num_shards`` shards in turn; committed shards are skipped."""
    out_dir = Path(out_dir)
    if shard is not None:
        num_shards = shard[1]
    wanted = [shard[0]] if shard is not None else list(range(num_shards))
    to_tag = missing_shards(out_dir, num_shards, manifest_df["sample_id"])  # also those of other samples
    for index in (i for i in wanted if i not in to_tag):  # before any is read again: never mix two taggers' tags
        _check_tagger(shard_paths(out_dir, index, num_shards)[0], tagger.tagger_id)
    brings_tags = tagger.preprocess is None and "tags" in manifest_df.columns  # tags that come with the data
    if brings_tags:  # read again where the manifest changed them
        to_tag += _changed_manifest_tags(manifest_df, out_dir, num_shards, [i for i in wanted if i not in to_tag])
    committed = [i for i in wanted if i not in to_tag]
    pending = [i for i in wanted if i not in committed]
    assignment = manifest_df["sample_id"].map(lambda s: shard_of(s, num_shards))
    pending_ids = manifest_df.loc[assignment.isin(pending), "sample_id"].tolist()
    known, reused = store.lookup(tagger.tagger_id, pending_ids) if store and pending else (set(), empty_tags_table())
    if brings_tags:  # another partition's manifest may give the same image other tags
        ids = sorted(known)
        known = {sid for sid, same in zip(ids, _tagged_as_brought(reused, ids, manifest_df)) if same}
        reused = reused[reused["sample_id"].isin(known)]
    loader = _LoaderOptions(batch_size, num_workers, progress)
    counts = TagCounts(shards_skipped=len(committed))
    for index in pending:
        rows = manifest_df[assignment == index]
        shard_reused = reused[reused["sample_id"].isin(rows["sample_id"])]
        paths = shard_paths(out_dir, index, num_shards)
        counts += _tag_shard(rows, Path(manifest_dir), tagger, paths, known, shard_reused, loader)
    return counts


def _tagged_as_brought(tags: pd.DataFrame, sample_ids: list[str], manifest_df: pd.DataFrame) -> list[bool]:
    """Per sample, whether ``tags`` holds the tags its manifest row brings (both sorted, deduplicated lists)."""
    brought = dict(zip(manifest_df["sample_id"], manifest_df["tags"]))
    return [list(stored) == list(brought.get(sid, [])) for sid, stored in zip(sample_ids, tag_lists(tags, sample_ids))]


def _changed_manifest_tags(manifest_df: pd.DataFrame, out_dir: Path, num_shards: int, shards: list[int]) -> list[int]:
    """The committed ``shards`` where a sample tagged from the manifest now comes with other tags."""
    changed = []
    for index in shards:
        samples_path, tags_path = shard_paths(out_dir, index, num_shards)
        samples = pd.read_parquet(samples_path)
        tagged = samples.loc[samples["status"].isin([TAGGED, REUSED]), "sample_id"].tolist()
        if not all(_tagged_as_brought(read_tags(tags_path), tagged, manifest_df)):
            changed.append(index)
    return changed


def _committed_paths(out_dir: Path, num_shards: int, sample_ids: Iterable[str]) -> list[tuple[Path, Path]]:
    missing = missing_shards(out_dir, num_shards, sample_ids)
    if missing:
        raise RuntimeError(f"{out_dir}: shard(s) {missing} of {num_shards} are not tagged yet for these samples")
    return [shard_paths(out_dir, i, num_shards) for i in range(num_shards)]


def shard_samples(out_dir: str | Path, num_shards: int, sample_ids: Iterable[str]) -> pd.DataFrame:
    """Every sample of a fully tagged partition (of ``sample_ids``, its manifest's) with its status (tagged, reused,
    quarantined) and reason."""
    paths = _committed_paths(Path(out_dir), num_shards, sample_ids)
    return pd.concat([pd.read_parquet(samples_path) for samples_path, _ in paths], ignore_index=True)


def collect_partition(manifest_df: pd.DataFrame, out_dir: str | Path, num_shards: int) -> pd.DataFrame:
    """Merge the committed shards into the partition's tags table, class tag counts and quarantine list."""
    out_dir = Path(out_dir)
    samples = shard_samples(out_dir, num_shards, manifest_df["sample_id"])  # checked: the manifest's shards, all
    if len(taggers := sorted(set(samples["tagger_id"]))) > 1:
        raise UserError(f"{out_dir} holds tags of {len(taggers)} taggers ({', '.join(taggers)}): write each tagger's "
                        "output to its own folder, and tag the partition again there")
    tags = pd.concat([read_tags(shard_paths(out_dir, i, num_shards)[1]) for i in range(num_shards)],
                     ignore_index=True)
    write_tags(tags, out_dir / TAGS_NAME)
    with atomic_path(out_dir / CLASS_TAG_COUNTS_NAME) as tmp:
        class_tag_counts(tags, manifest_df).to_parquet(tmp, index=False)
    quarantined = samples[samples["status"] == QUARANTINED].merge(manifest_df[["sample_id", "uri"]], on="sample_id")
    if not quarantined.empty:
        write_csv(quarantined[QUARANTINE_COLUMNS], out_dir / QUARANTINE_NAME)
    return tags
