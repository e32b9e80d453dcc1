"""A benchmark's own image tagger: a small CNN (:mod:`mavias.core.tagging.trained`) trained on the generator's
*tagging split*, images drawn with every attribute independent of the class (a seed stream no benchmark split uses),
so it learns each word from its pixels, never from the benchmark's shortcuts.

Its quality is set by a target mean per-tag F1 on a held-out tagging split: the tagger is trained on the smallest
budget of :data:`BUDGETS` whose F1 reaches the target (the largest when none does), so every generator gets a tagger
of the same quality whatever its difficulty. ``default`` (:data:`QUALITY_TARGETS`) lands between 0.6 and 0.85, as an
off-the-shelf tagger on unfamiliar images; ``low`` and ``high`` are the other points of the quality curve. The
tagger and its per-tag precision and recall are kept in the benchmark's folder (``tagger/<quality>/``) and reused
when the generator's images and the tagger's settings are the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from PIL import Image
from pydantic import BaseModel

from mavias.core.tagging.trained import TaggerTraining, TrainedTagger, tag_quality, train_tagger
from mavias.errors import UserError
from mavias.utils.atomic import write_json
from mavias.utils.csvfile import write_csv

TaggingSamples = Callable[[BaseModel, int, int], tuple[list[Image.Image], list[tuple[str, ...]]]]

QUALITY_TARGETS = {"low": 0.5, "default": 0.7, "high": 0.9}  # mean per-tag F1 on the held-out tagging split
BUDGETS = (250, 500, 750, 1000, 1500, 2000, 3000, 4000, 6000, 8000)  # tagging images tried, smallest first:
# steps small enough that the first budget past a target does not overshoot the default's 0.85 ceiling
HELD_OUT = 1000  # tagging images that score a tagger (a seed of their own)
TRAIN_SEED, HELD_OUT_SEED = 0, 1
TRAINING = TaggerTraining(image_size=24, width=16, epochs=20)
TAGGER_VERSION = 1  # of the tagger's recipe: a change here must retrain cached taggers
CHECKPOINT, QUALITY_TABLE, QUALITY_SUMMARY = "tagger.pt", "quality.csv", "quality.json"

# the generator settings that do not change the images a tagger sees
NOT_DRAWN = {"n_train", "n_val", "n_test_per_cell", "tag_miss_rate", "spurious_tags_per_image", "bias_align",
             "bg_align", "coobj_align", "color_align", "shortcut_fraction"}


def check_quality(quality: str) -> float:
    if quality not in QUALITY_TARGETS:
        raise UserError(f"unknown tagger quality {quality!r}", hint=f"use one of {', '.join(QUALITY_TARGETS)}")
    return QUALITY_TARGETS[quality]


def _key(name: str, cfg: BaseModel, quality: str) -> str:
    drawn = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in NOT_DRAWN}
    record = {"benchmark": name, "drawn": drawn, "quality": quality, "budgets": BUDGETS, "held_out": HELD_OUT,
              "training": asdict(TRAINING), "version": TAGGER_VERSION}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def benchmark_tagger(name: str, cfg: BaseModel, samples: TaggingSamples, vocabulary: list[str], folder: Path,
                     quality: str = "default") -> tuple[TrainedTagger, dict]:
    """The tagger of ``quality`` for this generator (trained, or read from ``folder/tagger/<quality>/``) and the
    summary of its quality on the held-out tagging split."""
    target = check_quality(quality)
    out = Path(folder) / "tagger" / quality
    key = _key(name, cfg, quality)
    summary_path = out / QUALITY_SUMMARY
    if summary_path.is_file() and json.loads(summary_path.read_text()).get("key") == key:
        return TrainedTagger(out / CHECKPOINT, vocabulary=vocabulary), json.loads(summary_path.read_text())
    held_out_images, held_out_tags = samples(cfg, HELD_OUT, HELD_OUT_SEED)
    for budget in BUDGETS:  # a sample's first images do not depend on how many are drawn
        images, tags = samples(cfg, budget, TRAIN_SEED)
        train_tagger(images, tags, vocabulary, TRAINING, out / CHECKPOINT)
        tagger = TrainedTagger(out / CHECKPOINT, vocabulary=vocabulary)
        predicted = [[word for word, _ in scored] for scored in tagger.tag_images(held_out_images)]
        table = tag_quality(predicted, held_out_tags, vocabulary)
        mean_f1 = float(table.loc[table["support"] > 0, "f1"].fillna(0.0).mean())
        if mean_f1 >= target:
            break
    write_csv(table, out / QUALITY_TABLE)
    summary = {"key": key, "quality": quality, "target_f1": target, "mean_f1": mean_f1, "tagging_images": budget,
               "held_out_images": HELD_OUT, "training": asdict(TRAINING), "tagger_id": tagger.tagger_id,
               "per_tag": table.to_dict(orient="records")}
    write_json(summary_path, summary)
    return tagger, summary
