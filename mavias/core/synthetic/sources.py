"""A built-in benchmark as a user meets it: tags from an image tagger and relevance from the judge, with the
generator's own attributes and ground truth kept apart, for scoring only.

The generator draws the images once into a folder; :func:`keep_truth` moves what it knows under ``truth/`` (its
manifest with the attribute tags, the ground-truth relevance). :func:`apply_sources` then writes a manifest, a
relevance table and ``benchmark.json`` from the chosen sources, into that folder or into a variant folder of its
own (its manifest then points at the images by absolute path):

- tags: ``tagger`` (default) replaces every image's tags by the benchmark tagger's (:mod:`.tagger`), with their
  scores in ``tags.parquet``; ``oracle`` keeps the generator's attributes (each missed at its ``tag_miss_rate``, plus
  spurious ones);
- relevance: ``judge`` (default) asks the offline judge about every (class, word) pair of the vocabulary; ``oracle``
  keeps the ground truth; a path reads a relevance table of the user's (its pairs must be the benchmark's); ``leak``
  K then marks each class's K most class-specific defining tags irrelevant (a judge mistake that hands the label to
  the bias path: a stress test);
- ``benchmark.json`` ``discovery`` says where the tags and decisions came from and how good they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
from PIL import Image
from pydantic import BaseModel

from mavias.core.judging.cache import decide_all
from mavias.core.judging.factory import JudgeSettings, make_judge
from mavias.core.judging.quality import evaluate_relevance
from mavias.core.manifest import MANIFEST_NAME, load_manifest, save_manifest
from mavias.core.relevance import RELEVANCE_COLUMNS, load_relevance, save_relevance
from mavias.core.synthetic.synthetic_scenes import INFO_NAME, RELEVANCE_NAME
from mavias.core.synthetic.tagger import TaggingSamples, benchmark_tagger
from mavias.core.tagging.base import read_tags, tag_lists, tags_table, write_tags
from mavias.core.tagging.trained import TrainedTagger
from mavias.errors import UserError
from mavias.utils.atomic import write_json
from mavias.utils.disk import sha256_file

TagSource = Literal["tagger", "oracle"]
RelevanceSource = Literal["judge", "oracle"] | Path
TRUTH_DIR = "truth"
TAGS_TABLE = "tags.parquet"
LEAK_SOURCE = "leak"


@dataclass(frozen=True)
class Sources:
    """Where a benchmark's tags and relevance decisions come from."""

    tags: TagSource = "tagger"
    relevance: RelevanceSource = "judge"
    leak: int = 0
    tagger_quality: str = "default"
    tagger_checkpoint: Path | None = None

    @property
    def slug(self) -> str:
        """A folder name for these sources; a table or checkpoint of the user's is named by its contents."""
        from mavias.core.judging.offline import JUDGE_VERSION  # decisions of another version live apart

        if self.tagger_checkpoint is not None:
            tags = f"tagger-file-{sha256_file(self.tagger_checkpoint)[:12]}"
        else:
            tags = f"tagger-{self.tagger_quality}" if self.tags == "tagger" else "oracle"
        if isinstance(self.relevance, Path):
            relevance = f"table-{sha256_file(self.relevance)[:12]}"
        else:
            relevance = JUDGE_VERSION if self.relevance == "judge" else self.relevance
        return f"{tags}_{relevance}" + (f"_leak{self.leak}" if self.leak else "")


def keep_truth(folder: Path) -> None:
    """The generator's manifest (its attribute tags) and ground-truth relevance, kept under ``truth/``."""
    truth = folder / TRUTH_DIR
    truth.mkdir(exist_ok=True)
    (folder / RELEVANCE_NAME).replace(truth / RELEVANCE_NAME)
    (folder / MANIFEST_NAME).replace(truth / MANIFEST_NAME)


def judge_relevance(truth: pd.DataFrame) -> pd.DataFrame:
    """The offline judge's decision on every (class, word) pair of the benchmark's vocabulary (the pairs the ground
    truth decides), so its precision and recall can be scored."""
    wanted = truth.groupby("class")["tag"].agg(set).to_dict()
    return decide_all(make_judge(JudgeSettings()), {str(c): set(t) for c, t in wanted.items()})


def read_relevance(path: Path, truth: pd.DataFrame) -> pd.DataFrame:
    """A user's relevance table for the benchmark: it decides exactly the benchmark's (class, word) pairs."""
    table = load_relevance(path)
    known, decided = set(zip(truth["class"], truth["tag"])), set(zip(table["class"], table["tag"]))
    if unknown := sorted(decided - known):
        raise UserError(f"{path} decides {len(unknown)} (class, tag) pair(s) the benchmark does not have, e.g. "
                        f"{unknown[:3]}", hint="decide the pairs of its truth/relevance.parquet")
    if missing := len(known - decided):
        raise UserError(f"{path} leaves {missing} (class, tag) pair(s) of the benchmark undecided",
                        hint="decide every pair of its truth/relevance.parquet")
    return table


def leak_defining_tags(relevance: pd.DataFrame, truth: pd.DataFrame, manifest: pd.DataFrame, k: int) -> pd.DataFrame:
    """``relevance`` with each class's ``k`` most class-specific truly relevant tags that it marks relevant turned
    irrelevant. Specificity over the training images: the share of the class's images carrying the tag times the
    share of the tag's images in the class (a tag every class carries, as digits' "numeral", leaks no label;
    ties by name). The class's own name can be leaked too: the stress is applied after the judge and its rule that
    a class's own name is relevant (:mod:`mavias.core.judging.names`)."""
    images = manifest.loc[manifest["split"] == "train", ["label", "tags"]]
    train = images.explode("tags").dropna()
    together = train.groupby(["label", "tags"]).size()
    per_class = images["label"].value_counts()
    per_tag = train.groupby("tags").size()
    defining = set(zip(truth.loc[truth["relevant"], "class"], truth.loc[truth["relevant"], "tag"]))

    def specificity(name: str, tag: str) -> float:
        n = together.get((name, tag), 0)
        return n * n / (per_class[name] * per_tag[tag]) if n else 0.0

    table = relevance.copy()
    for name, rows in table[table["relevant"]].groupby("class"):
        candidates = [t for t in rows["tag"] if (name, t) in defining]
        ranked = sorted(candidates, key=lambda t: (-specificity(name, t), t))[:k]
        table.loc[(table["class"] == name) & table["tag"].isin(ranked), ["relevant", "source"]] = [False, LEAK_SOURCE]
    return table


def _tagged(manifest: pd.DataFrame, folder: Path, tagger: TrainedTagger, cache: Path) -> pd.DataFrame:
    """The tagger's tags and scores for every image (kept beside the tagger: every variant reads the same)."""
    if not cache.is_file():
        images = []
        for uri in manifest["uri"]:
            with Image.open(folder / uri) as image:
                images.append(image.convert("RGB"))
        write_tags(tags_table(manifest["sample_id"].tolist(), tagger.tag_images(images)), cache)
    return read_tags(cache)


def _tags_file(tagger: TrainedTagger) -> str:
    """Named by the tagger's id (weights and cut-off), so tags at another cut-off are never read back."""
    return f"tags-{tagger.tagger_id.replace(':', '_')}.parquet"


def _tags(folder: Path, manifest: pd.DataFrame, info: dict, name: str, cfg: BaseModel, samples: TaggingSamples,
          sources: Sources) -> tuple[pd.DataFrame | None, dict]:
    """The tags table of the chosen tag source (None: the generator's), and what to say of it."""
    if sources.tags == "oracle":
        return None, {"source": "oracle"}
    if sources.tagger_checkpoint is not None:
        tagger = TrainedTagger(sources.tagger_checkpoint, vocabulary=info["vocabulary"])
        cache = folder / "tagger" / _tags_file(tagger)
        return _tagged(manifest, folder, tagger, cache), {"source": "tagger", "tagger_id": tagger.tagger_id,
                                                          "checkpoint": str(sources.tagger_checkpoint)}
    tagger, summary = benchmark_tagger(name, cfg, samples, info["vocabulary"], folder, sources.tagger_quality)
    cache = folder / "tagger" / sources.tagger_quality / _tags_file(tagger)
    # per tag: support, precision, recall, f1 on held-out images
    said = {key: summary[key] for key in ("quality", "mean_f1", "threshold", "tagging_images", "held_out_images",
                                          "tagger_id", "per_tag")}
    return _tagged(manifest, folder, tagger, cache), {"source": "tagger", **said}


def _relevance(truth: pd.DataFrame, manifest: pd.DataFrame, sources: Sources) -> tuple[pd.DataFrame, dict]:
    if isinstance(sources.relevance, Path):
        decisions, source = read_relevance(sources.relevance, truth), str(sources.relevance)
    else:
        decisions = truth if sources.relevance == "oracle" else judge_relevance(truth)
        source = sources.relevance
    if sources.leak:
        decisions = leak_defining_tags(decisions, truth, manifest, sources.leak)
    scored = evaluate_relevance(decisions[RELEVANCE_COLUMNS], truth).overall
    return decisions, {"source": source, "leak": sources.leak, "precision": scored.precision,
                       "recall": scored.recall, "f1": scored.f1}


def apply_sources(folder: Path, out: Path, *, name: str, cfg: BaseModel, samples: TaggingSamples,
                  sources: Sources) -> Path:
    """Write ``out``'s manifest, relevance table and ``benchmark.json`` from ``sources`` (module docstring) over the
    images and truth of ``folder``; the manifest's path returned."""
    if sources.leak < 0:
        raise UserError(f"leak must be 0 or more, got {sources.leak}")
    info = json.loads((folder / INFO_NAME).read_text())
    manifest = load_manifest(folder / TRUTH_DIR / MANIFEST_NAME, check_files=False)
    truth = load_relevance(folder / TRUTH_DIR / RELEVANCE_NAME)
    table, said_of_tags = _tags(folder, manifest, info, name, cfg, samples, sources)
    if table is not None:
        manifest = manifest.assign(tags=tag_lists(table, manifest["sample_id"]).set_axis(manifest.index).tolist())
        write_tags(table, out / TAGS_TABLE)
    decisions, said_of_relevance = _relevance(truth, manifest, sources)
    if out.resolve() != folder.resolve():
        manifest = manifest.assign(uri=[str((folder / uri).resolve()) for uri in manifest["uri"]])
    save_relevance(decisions, out / RELEVANCE_NAME)
    write_json(out / INFO_NAME, info | {"discovery": {"tags": said_of_tags, "relevance": said_of_relevance}})
    return save_manifest(manifest, out / MANIFEST_NAME)
