"""`mavias judge`: decide per class which tags are relevant (intrinsic) and which are potential biases."""

from __future__ import annotations

import dataclasses
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mavias.cli.options import (
    JudgeKind,
    LlmBaseUrl,
    LlmMaxRetries,
    LlmModel,
    LlmTimeout,
    Reasoning,
    ReviewPath,
    Samples,
    SystemInUser,
    console,
    warn,
    writable_file,
    writable_table,
)
from mavias.core.judging.base import BATCH_SIZE, JudgeStats, RelevanceJudge
from mavias.core.judging.cache import DecisionCache, decide_all
from mavias.core.judging.factory import DEFAULT_BASE_URL, DEFAULT_LLM_MODEL, JUDGE_KINDS, JudgeSettings, make_judge
from mavias.core.judging.quality import (
    TRUTH_DIR,
    Evaluation,
    decision_errors,
    errors_table,
    evaluate_relevance,
    evaluation_table,
)
from mavias.core.judging.review import apply_review, export_review, load_review
from mavias.core.manifest import load_manifest
from mavias.core.relevance import load_relevance, save_relevance
from mavias.core.tagging.base import read_tags
from mavias.errors import UserError

REALWORLD = ("realworld-dev", "realworld-heldout", "realworld-unseen", "realworld-blind")
IMAGE_BENCHMARKS = ("synthetic-scenes", "three-cue-scenes", "shape-colours", "shape-textures", "digit-backgrounds")
BENCHMARKS = (*IMAGE_BENCHMARKS, *REALWORLD)

CachePath = Annotated[
    Path | None, typer.Option("--cache", help="decision cache, SQLite (default ~/.cache/mavias/judge-decisions.sqlite)")
]
NoCache = Annotated[bool, typer.Option("--no-cache", help="judge every tag again and store nothing")]
BatchSize = Annotated[int, typer.Option(help="tags per judge call", min=1, max=BATCH_SIZE)]

app = typer.Typer(help=__doc__, no_args_is_help=True)


def default_cache_path() -> Path:
    root = Path(os.environ.get("MAVIAS_CACHE_DIR", Path.home() / ".cache" / "mavias"))
    return root / "judge-decisions.sqlite"


@dataclass(frozen=True)
class JudgeOptions:
    """The command-line choice of judge, cache and review, shared by `run` and `eval`."""

    settings: JudgeSettings = JudgeSettings()
    cache: Path | None = None
    no_cache: bool = False
    review: Path | None = None
    batch_size: int = BATCH_SIZE

    def decide(self, wanted: dict[str, set[str]]) -> tuple[pd.DataFrame, RelevanceJudge]:
        """Decide every (class, tag) with a live count of the tags sent to the judge; the judge comes back too."""
        reviewed = load_review(self.review) if self.review else None
        with (
            nullcontext(None) if self.no_cache else DecisionCache(self.cache or default_cache_path()) as cache,
            Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar,
        ):
            judge = make_judge(self.settings)
            task = bar.add_task(f"judging with {judge.judge_id}", total=None)
            judged = 0

            def advance(batch: int) -> None:
                nonlocal judged
                judged += batch
                bar.update(task, description=f"judging with {judge.judge_id}: {judged} tags")

            table = decide_all(judge, wanted, cache, reviewed, batch_size=self.batch_size, on_batch=advance)
        warn(reviewed.unmatched(wanted) if reviewed else [])
        return table, judge


def tags_by_class(manifest: Path, tags: Path | None = None) -> dict[str, set[str]]:
    """Every tag seen on each class's images: the manifest's ``tags`` column, or a tags table joined on sample_id."""
    samples = load_manifest(manifest, check_files=False)
    if tags is not None:
        table = read_tags(tags, columns=("sample_id", "tag"))  # the judge needs no score
        if table.empty:
            raise UserError(f"the tags table {tags} holds no tag: nothing to judge")
        pairs = table.merge(samples[["sample_id", "label"]], on="sample_id")
        if pairs.empty:
            raise UserError(f"no image of {manifest} is in {tags} (their sample_ids differ)",
                            hint="pass the tags of this manifest's images (`mavias tag` or `mavias discover` of it)")
    elif "tags" in samples.columns:
        pairs = samples[["label", "tags"]].explode("tags").dropna().rename(columns={"tags": "tag"})
    else:
        raise typer.BadParameter(f"{manifest} has no tags column; pass --tags (a tags table from `mavias tag`)")
    return {str(label): set(rows["tag"]) for label, rows in pairs.groupby("label")}


def summary_table(table: pd.DataFrame) -> Table:
    summary = Table(title="relevance decisions")
    for column in ("class", "tags", "relevant", "irrelevant (bias candidates)", "reviewed"):
        summary.add_column(column, justify="left" if column == "class" else "right")
    for name, rows in table.groupby("class"):
        relevant = int(rows["relevant"].sum())
        reviewed = int((rows["source"] == "review").sum())
        summary.add_row(str(name), str(len(rows)), str(relevant), str(len(rows) - relevant), str(reviewed))
    return summary


def stats_table(stats: JudgeStats) -> Table:
    table = Table(title="judge stats")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for name, value in stats.as_dict().items():
        table.add_row(name, str(value))
    return table


@app.command()
def run(
    manifest: Annotated[Path | None, typer.Option(help="manifest whose images' tags are judged per label")] = None,
    tags: Annotated[
        Path | None, typer.Option(help="tags table from `mavias tag` (default: the manifest's tags)")
    ] = None,
    classes: Annotated[
        str | None, typer.Option(help="comma-separated classes: judge a whole vocabulary instead")
    ] = None,
    vocabulary: Annotated[Path | None, typer.Option(help="vocabulary for --classes (default: built-in)")] = None,
    out: Annotated[
        Path, typer.Option(help="relevance table to write (.parquet or .csv)", callback=writable_table)
    ] = Path("relevance.parquet"),
    judge: JudgeKind = "offline",
    base_url: LlmBaseUrl = DEFAULT_BASE_URL,
    llm_model: LlmModel = DEFAULT_LLM_MODEL,
    timeout: LlmTimeout = 120.0,
    max_retries: LlmMaxRetries = 5,
    system_in_user: SystemInUser = False,
    cache: CachePath = None,
    no_cache: NoCache = False,
    review: ReviewPath = None,
    batch_size: BatchSize = BATCH_SIZE,
    reasoning: Reasoning = False,
    samples: Samples = 1,
) -> None:
    """Judge a manifest's tags per class (or a vocabulary for given classes) and write the relevance table."""
    if (manifest is None) == (classes is None):
        raise typer.BadParameter("pass either --manifest or --classes")
    if classes is not None and tags is not None:
        raise typer.BadParameter("--tags goes with --manifest (with --classes, --vocabulary names the tags)")
    if manifest is not None and vocabulary is not None:
        raise typer.BadParameter("--vocabulary goes with --classes (with --manifest, the images' tags are judged)")
    if classes is not None:
        from mavias.core.tagging.vocabulary import load_vocabulary

        words = set(load_vocabulary(vocabulary))
        wanted = {name.strip(): words for name in classes.split(",") if name.strip()}
        if not wanted:
            raise UserError(f"--classes {classes!r} names no class", hint="e.g. --classes cat,dog")
    else:
        wanted = tags_by_class(manifest, tags)
        if not wanted:
            raise UserError(f"no image of {manifest} carries a tag: nothing to judge")
    settings = JudgeSettings(kind=judge, base_url=base_url, model=llm_model, timeout=timeout, max_retries=max_retries,
                             system_prompt_in_user=system_in_user, reasoning=reasoning, samples=samples)
    options = JudgeOptions(settings=settings, cache=cache, no_cache=no_cache, review=review, batch_size=batch_size)
    table, judge_obj = options.decide(wanted)
    save_relevance(table, out)
    console.print(summary_table(table))
    console.print(stats_table(judge_obj.stats))
    console.print(f"wrote {out}")


@app.command("export-review")
def export_review_command(
    relevance: Annotated[Path, typer.Argument(help="relevance table (from `mavias judge run`)")],
    out: Annotated[Path, typer.Option(help="reviewed-decisions YAML to write", callback=writable_file)] = Path(
        "review.yaml"
    ),
) -> None:
    """Write the current decisions as a reviewed-decisions YAML for a person to edit (then pass it as --review)."""
    export_review(load_relevance(relevance), out)
    console.print(f"wrote {out}; edit it and pass it to `mavias judge run --review {out}`")


def load_truth(truth: Path | None, benchmark: str | None) -> tuple[pd.DataFrame, str]:
    if (truth is None) == (benchmark is None):
        raise typer.BadParameter("pass either --truth or --benchmark")
    if truth is not None:
        return load_relevance(truth, default_source="ground_truth"), truth.stem
    if benchmark not in BENCHMARKS:
        raise typer.BadParameter(f"unknown benchmark {benchmark!r}; use one of {BENCHMARKS}")
    if benchmark in REALWORLD:
        return load_relevance(TRUTH_DIR / f"{benchmark}.csv"), benchmark
    from mavias.core.synthetic import BENCHMARKS as GENERATORS  # the image benchmarks' own ground truth

    generator = GENERATORS[benchmark]
    return generator.truth(generator.config()), benchmark


@app.command("eval")
def eval_command(
    truth: Annotated[Path | None, typer.Option(help="ground-truth relevance table")] = None,
    benchmark: Annotated[str | None, typer.Option(help=f"built-in ground truth: {', '.join(BENCHMARKS)}")] = None,
    predicted: Annotated[
        Path | None, typer.Option(help="score this relevance table instead of running a judge")
    ] = None,
    judge: JudgeKind = "offline",
    base_url: LlmBaseUrl = DEFAULT_BASE_URL,
    llm_model: LlmModel = DEFAULT_LLM_MODEL,
    timeout: LlmTimeout = 120.0,
    max_retries: LlmMaxRetries = 5,
    system_in_user: SystemInUser = False,
    cache: CachePath = None,
    no_cache: NoCache = False,
    review: ReviewPath = None,
    batch_size: BatchSize = BATCH_SIZE,
    reasoning: Reasoning = False,
    samples: Samples = 1,
    compare: Annotated[
        str | None, typer.Option("--compare", help="a second judge (offline or llm) scored on the same ground truth")
    ] = None,
) -> None:
    """Precision / recall / F1 of a judge's relevant set against a ground-truth relevance table.

    Prints, per class, the relevant tags the judge missed and the irrelevant tags it accepted; fix them in a
    reviewed-decisions file (`mavias judge export-review`) and pass it with --review.
    """
    truth_table, dataset = load_truth(truth, benchmark)
    wanted = {str(n): set(rows["tag"]) for n, rows in truth_table.groupby("class")}
    if compare is not None and compare not in JUDGE_KINDS:
        raise typer.BadParameter(f"unknown judge {compare!r} for --compare; use one of {JUDGE_KINDS}")
    settings = JudgeSettings(kind=judge, base_url=base_url, model=llm_model, timeout=timeout, max_retries=max_retries,
                             system_prompt_in_user=system_in_user, reasoning=reasoning, samples=samples)
    options = JudgeOptions(settings=settings, cache=cache, no_cache=no_cache, review=review, batch_size=batch_size)
    if predicted is not None:
        table = load_relevance(predicted)
        if review:
            reviewed = load_review(review)
            table = apply_review(table, reviewed)
            warn(reviewed.unmatched(wanted))
        runs = [(predicted.stem, table, None)]
    else:
        table, judge_obj = options.decide(wanted)
        runs = [(judge_obj.judge_id, table, judge_obj.stats.requests)]
    if compare is not None:
        table, judge_obj = dataclasses.replace(options, settings=dataclasses.replace(settings, kind=compare)).decide(
            wanted)
        runs.append((judge_obj.judge_id, table, judge_obj.stats.requests))
    evaluations = []
    for label, table, _ in runs:
        evaluations.append(evaluate_relevance(table, truth_table))
        console.print(evaluation_table(evaluations[-1], judge=label, dataset=dataset))
        errors = decision_errors(table, truth_table)
        if errors:
            console.print(errors_table(errors, title=f"{label}: wrong decisions per class"))
    if len(runs) > 1:
        console.print(comparison_table([(label, e, n) for (label, _, n), e in zip(runs, evaluations, strict=True)]))
    if any(decision_errors(table, truth_table) for _, table, _ in runs):
        console.print("fix wrong decisions with `mavias judge export-review` and `--review review.yaml`")


def comparison_table(runs: list[tuple[str, Evaluation, int | None]]) -> Table:
    """Two or more judges on the same ground truth, micro-averaged, with the requests each sent."""
    table = Table(title="judges compared on the same ground truth")
    for column in ("judge", "precision", "recall", "F1", "requests"):
        table.add_column(column, justify="left" if column == "judge" else "right")
    for label, evaluation, requests in runs:
        scores = evaluation.overall
        table.add_row(
            label,
            f"{100 * scores.precision:.1f}",
            f"{100 * scores.recall:.1f}",
            f"{100 * scores.f1:.1f}",
            "-" if requests is None else str(requests),
        )
    return table
