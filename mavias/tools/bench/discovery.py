"""`mavias bench discovery`: tagger throughput, encoding throughput with and without dedupe, judge requests and quality.

Everything runs on synthetic-scenes:

- tagger: the OpenCLIP zero-shot tagger with a randomly initialised model of the configured architecture (no
  weights are reachable offline; throughput does not depend on the weights), over ``tag_images`` images, timed
  end to end through :func:`tag_partition` (decoding, data loader, model, commit), after a one-batch warm-up;
- encoding: every training sample's irrelevant-tag prompt (manifest tags minus the ground-truth relevant ones)
  encoded once per sample ("without dedupe") and once per distinct prompt through the embedding store ("with");
- judging: the judge (offline, or an OpenAI-compatible LLM when ``base_url`` is given) over every (class, tag)
  pair of the benchmark, counting requests per class, then again from the decision cache (zero requests), and
  its precision / recall against the ground-truth relevance.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from mavias.core.encode import MINILM, EmbeddingStore, TextEncoder, bias_embeddings, bias_prompt
from mavias.core.encode.defaults import OPENCLIP_MODEL
from mavias.core.judging.base import RelevanceJudge
from mavias.core.judging.cache import DecisionCache, DecisionTally, decide_all
from mavias.core.judging.quality import Evaluation, evaluate_relevance, evaluation_table
from mavias.core.manifest import load_manifest
from mavias.core.relevance import irrelevant_tags, load_relevance
from mavias.core.synthetic import (
    SyntheticScenesConfig,
    benchmark_vocabulary,
    make_synthetic_scenes,
)
from mavias.core.tagging.run import tag_partition
from mavias.utils.atomic import write_report

BENCH_SCENES = SyntheticScenesConfig(n_train=2000, n_val=200, n_test_per_cell=4)


def bench_tagger(
    manifest: pd.DataFrame, manifest_dir: Path, out: Path, *, model: str, n_images: int, batch_size: int, device: str
) -> dict:
    from mavias.core.tagging.openclip import OpenClipTagger

    classes = tuple(sorted(manifest["label"].unique()))
    vocabulary = benchmark_vocabulary(classes)
    tagger = OpenClipTagger(model, None, vocabulary=vocabulary, device=device, cache_dir=out / "cache")
    warmup, timed = manifest.iloc[:batch_size], manifest.iloc[batch_size : batch_size + n_images]
    options = {"num_shards": 1, "batch_size": batch_size, "progress": False}
    tag_partition(warmup, manifest_dir, tagger, out / "warmup", **options)
    start = time.perf_counter()
    counts = tag_partition(timed, manifest_dir, tagger, out / "timed", **options)
    seconds = time.perf_counter() - start
    return {
        "model": model,
        "weights": tagger.clip.weights_id,
        "device": str(tagger.clip.device),
        "threads": torch.get_num_threads(),
        "images": counts.images_tagged,
        "batch_size": batch_size,
        "seconds": seconds,
        "images_per_second": counts.images_tagged / seconds,
    }


def bench_encoding(labels: pd.Series, tags: pd.Series, relevance: pd.DataFrame, encoder: TextEncoder,
                   store_dir: Path) -> dict:
    prompts = [bias_prompt(sample) for sample in irrelevant_tags(labels, tags, relevance)]
    start = time.perf_counter()
    for i in range(0, len(prompts), 512):
        encoder.encode(prompts[i : i + 512])
    plain = time.perf_counter() - start
    shutil.rmtree(store_dir, ignore_errors=True)
    start = time.perf_counter()
    n_encoded = bias_embeddings(labels, tags, relevance, encoder, EmbeddingStore(store_dir)).encoded
    deduped = time.perf_counter() - start
    return {
        "encoder": encoder.encoder_id,
        "samples": len(prompts),
        "distinct_prompts": n_encoded,
        "without_dedupe": {"seconds": plain, "encodings_per_second": len(prompts) / plain},
        "with_dedupe": {
            "seconds": deduped,
            "encodings_per_second": n_encoded / deduped,
            "samples_per_second": len(prompts) / deduped,
        },
        "speedup": plain / deduped,
    }


def bench_judge(judge: RelevanceJudge, truth: pd.DataFrame) -> tuple[dict, Evaluation]:
    first, rerun = DecisionTally(), DecisionTally()
    tags_by_class = truth.groupby("class")["tag"].agg(list).to_dict()
    with DecisionCache(None) as cache:
        start = time.perf_counter()
        predicted = decide_all(judge, tags_by_class, cache, tally=first)
        seconds = time.perf_counter() - start
        decide_all(judge, tags_by_class, cache, tally=rerun)
    evaluation = evaluate_relevance(predicted, truth)
    report = {
        "judge": judge.judge_id,
        "seconds": seconds,
        "requests_per_class": dict(first.calls),
        "tags_per_class": {cls: len(tags) for cls, tags in tags_by_class.items()},
        "requests_on_rerun": sum(rerun.calls.values()),
        "quality": {
            name: {"precision": s.precision, "recall": s.recall, "f1": s.f1, "tp": s.true_positives,
                   "fp": s.false_positives, "fn": s.false_negatives}
            for name, s in [*sorted(evaluation.per_class.items()), ("all (micro)", evaluation.overall)]
        },  # fmt: skip
    }
    return report, evaluation


def run_discovery_bench(
    work: Path = Path("runs/bench-discovery"),
    *,
    model: str = OPENCLIP_MODEL,
    tag_images: int = 16,
    batch_size: int = 8,
    device: str = "auto",
    encoder: str = MINILM,
    base_url: str | None = None,
    llm_model: str = "gpt-4o",
    scenes_cfg: SyntheticScenesConfig | None = None,
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict:
    """Run the discovery benchmark; print its tables on ``console`` when given; return (and optionally save) it."""
    from mavias.core.encode.factory import make_encoder
    from mavias.core.judging.factory import JudgeSettings, make_judge

    start = time.perf_counter()
    work = Path(work)
    manifest_path = make_synthetic_scenes(work / "synthetic-scenes", scenes_cfg or BENCH_SCENES)
    manifest = load_manifest(manifest_path, check_files=False)
    truth = load_relevance(manifest_path.parent / "relevance.parquet")
    train = manifest[manifest["split"] == "train"]
    judge = make_judge(JudgeSettings(kind="llm", base_url=base_url, model=llm_model) if base_url else JudgeSettings())
    judging, evaluation = bench_judge(judge, truth)
    report = {
        "tagger": bench_tagger(
            manifest, manifest_path.parent, work / "tagging", model=model, n_images=tag_images, batch_size=batch_size,
            device=device,
        ),
        "encoding": bench_encoding(
            train["label"], train["tags"], truth, make_encoder(encoder, device=device),
            work / "embeddings",
        ),
        "judging": judging,
    }  # fmt: skip
    report["wall_seconds"] = time.perf_counter() - start
    if console is not None:
        print_discovery_report(report, console)
        console.print(evaluation_table(evaluation, judge=judge.judge_id, dataset="synthetic-scenes"))
    if json_path is not None:
        write_report(json_path, report)
    return report


def print_discovery_report(report: dict, console: Console) -> None:
    tagger, encoding, judging = report["tagger"], report["encoding"], report["judging"]
    console.print(
        f"tagger {tagger['model']} ({tagger['weights']}) on {tagger['device']}: "
        f"{tagger['images_per_second']:.2f} images/s ({tagger['images']} images, batch {tagger['batch_size']})"
    )
    console.print(
        f"encoding {encoding['samples']} samples with {encoding['encoder']}: "
        f"without dedupe {encoding['without_dedupe']['encodings_per_second']:.0f} encodings/s; "
        f"with dedupe {encoding['distinct_prompts']} distinct prompts, "
        f"{encoding['with_dedupe']['samples_per_second']:.0f} samples/s ({encoding['speedup']:.1f}x)"
    )
    per_class = ", ".join(f"{cls}: {n}" for cls, n in judging["requests_per_class"].items())
    console.print(
        f"judge {judging['judge']}: requests per class {per_class}; on rerun {judging['requests_on_rerun']}"
    )
