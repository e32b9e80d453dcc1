"""The options several commands share, one name per thing across commands (``--tagger-model`` is always the image
tagger's model, ``--llm-model`` the judge's LLM, ``--encoder`` the text encoder spec), and the helpers that turn them
into the library's settings. Nothing here imports torch: a command's ``--help`` must answer at once."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from mavias.core.encode.factory import SPEC_FORMS, EncoderSpecError, parse_encoder_spec
from mavias.core.train.config import preset_names
from mavias.errors import UserError
from mavias.utils.console import make_console

if TYPE_CHECKING:
    from mavias.core.synthetic import Sources
    from mavias.core.train.config import TrainConfig
    from mavias.core.train.prepare import PreparedData

console = make_console()



def command_line(*words: object) -> str:
    """A command to print for the user to run: each word quoted for the shell where it needs it (a path with spaces),
    and escaped for the console's markup (a folder named ``[raw]``)."""
    return escape(shlex.join(str(word) for word in words))


def writable(path: Path | None) -> Path | None:
    """An output folder the command can create: checked as the option is read, before any work that a late
    failure to write would waste."""
    if path is not None and path.exists() and not path.is_dir():
        raise typer.BadParameter(f"{path} is a file; name a folder to write into (a new one, or an existing folder)")
    return _creatable(path)


def _creatable(path: Path | None) -> Path | None:
    """A path whose nearest existing ancestor is a folder this user can write to."""
    if path is None:
        return None
    existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
    if existing != path and not existing.is_dir():
        raise typer.BadParameter(f"{existing} is a file, so {path} cannot be made inside it; choose another path")
    folder = existing if existing.is_dir() else existing.parent
    if not os.access(folder, os.W_OK):
        raise typer.BadParameter(f"{folder} cannot be written to by this user; choose another path, or fix its "
                                 "permissions")
    return path


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def writable_file(path: Path | None) -> Path | None:
    """:func:`writable`, for an output that is a file: an existing folder there is refused."""
    if path is not None and path.is_dir():
        raise typer.BadParameter(f"{path} is a folder; name the file to write (inside it, or elsewhere)")
    return _creatable(path)


def writable_table(path: Path | None) -> Path | None:
    """:func:`writable_file`, for a table: a ``.parquet`` or ``.csv`` file."""
    if path is not None and path.suffix not in (".parquet", ".csv"):
        raise typer.BadParameter(f"{path}: a table is written as .parquet or .csv; name the file with one of them")
    return writable_file(path)


def writable_figure(path: Path | None) -> Path | None:
    """:func:`writable_file`, for a figure: a format the plot can be saved as."""
    if path is not None and path.suffix.lower() not in FIGURE_SUFFIXES:
        raise typer.BadParameter(f"{path}: a figure is written as {', '.join(FIGURE_SUFFIXES)}; name the file with "
                                 "one of them")
    return writable_file(path)


def model_name(name: str | None) -> str | None:
    """A model name the registry accepts (it names S3 keys), checked as the option is read."""
    from mavias.storage.names import UnsafeName, check_name

    try:
        return None if name is None else check_name("model name", name)
    except UnsafeName as error:
        raise typer.BadParameter(str(error)) from None


# --- data ------------------------------------------------------------------------------------------------------
Manifest = Annotated[Path, typer.Option("--manifest", help="dataset manifest (.parquet or .csv)", exists=True)]
Relevance = Annotated[Path, typer.Option("--relevance", help="relevance table (class, tag, relevant, source)",
                                         exists=True)]
Tags = Annotated[Path | None, typer.Option("--tags", help="tags table from `mavias tag`; default: the manifest's tags")]
Workspace = Annotated[Path, typer.Option("--workspace", help="cache folder of the bias embeddings (one store per "
                                         "encoder)")]
GroupAttrs = Annotated[str, typer.Option("--group-attrs", help="comma-separated attr_* columns forming true groups")]
MinSupport = Annotated[int, typer.Option("--min-support", min=1, help="samples a (class, tag) pair needs to enter B', "
                                         "and a group needs for its accuracy to count (smaller ones are flagged)")]

# --- training settings -----------------------------------------------------------------------------------------
ConfigFile = Annotated[Path | None, typer.Option("--config", help="YAML training config")]
Preset = Annotated[str | None, typer.Option("--preset", help=f"paper preset: {', '.join(preset_names())}")]
Overrides = Annotated[list[str], typer.Option("--set", help="override, e.g. --set mavias.lam=0.4 (repeatable)")]

# --- the image tagger ------------------------------------------------------------------------------------------
TaggerKind = Annotated[str, typer.Option(
    "--tagger", help="openclip (zero-shot over a vocabulary), manifest (its tags column), or auto (manifest if it "
    "has tags)")]
TaggerModel = Annotated[str, typer.Option("--tagger-model", help="the tagger's open_clip architecture")]
Pretrained = Annotated[str, typer.Option(
    "--pretrained", help="the tagger's open_clip pretrained tag, a local checkpoint file, or 'none' (random init)")]
VocabularyPath = Annotated[Path | None, typer.Option("--vocabulary", help="tag vocabulary file (default: built-in)")]
Threshold = Annotated[float, typer.Option(
    min=0.0, help="keep tags with probability >= threshold x uniform (1/|vocabulary|)")]
TopK = Annotated[int, typer.Option("--top-k", min=1, help="at most this many tags per image")]


def available_device(name: str) -> str:
    """``--device``, checked as it is read (torch is imported only for a GPU asked for by name)."""
    if name not in ("auto", "cpu"):
        from mavias.core.devices import choose_device

        try:
            choose_device(name)
        except UserError as error:
            raise typer.BadParameter(str(error)) from None
    return name


Device = Annotated[str, typer.Option(help="auto (GPU when present), cpu, cuda, cuda:1, ...", callback=available_device)]
CacheDir = Annotated[Path | None, typer.Option(help="cache of vocabulary embeddings (default ~/.cache/mavias)")]
WeightsDir = Annotated[str | None, typer.Option(help="open_clip / Hugging Face weights cache folder")]
AllowDownload = Annotated[bool, typer.Option(help="allow downloading weights (default: offline, local cache only)")]
ImageBatchSize = Annotated[int, typer.Option(help="images per batch", min=1)]
Workers = Annotated[int, typer.Option(help="data-loading worker processes", min=0)]

# --- the relevance judge ---------------------------------------------------------------------------------------
def judge_kind(kind: str) -> str:
    """A judge the library has, checked as the option is read, before any work."""
    from mavias.core.judging.factory import JUDGE_KINDS

    if kind not in JUDGE_KINDS:
        raise typer.BadParameter(f"unknown judge {kind!r}: use one of {', '.join(JUDGE_KINDS)}")
    return kind


JudgeKind = Annotated[str, typer.Option("--judge", help="offline (WordNet + MiniLM, no network) or llm",
                                        callback=judge_kind)]
LlmBaseUrl = Annotated[str, typer.Option(
    "--base-url", envvar="MAVIAS_LLM_BASE_URL",
    help="OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp); its key: $MAVIAS_LLM_API_KEY or "
    "$OPENAI_API_KEY")]
LlmModel = Annotated[str, typer.Option("--llm-model", envvar="MAVIAS_LLM_MODEL", help="the judge's LLM model name")]
LlmTimeout = Annotated[float, typer.Option("--timeout", min=1.0, help="seconds per LLM request")]
LlmMaxRetries = Annotated[int, typer.Option("--max-retries", min=0, help="retries per batch on 429 / 5xx / timeouts")]
SystemInUser = Annotated[bool, typer.Option(
    help="send the instructions in the user message (chat templates that drop the system role)")]
Reasoning = Annotated[bool, typer.Option(
    help="reasoning model: max_completion_tokens, default temperature (else learnt from the first 400)")]
Samples = Annotated[int, typer.Option(help="LLM answers per batch, majority vote (self-consistency)", min=1)]
ReviewPath = Annotated[Path | None, typer.Option("--review", help="reviewed decisions (YAML) that override the judge")]

# --- the text encoder ------------------------------------------------------------------------------------------
def encoder_spec(spec: str) -> str:
    """An encoder spec checked as the option is read, before any data is."""
    try:
        parse_encoder_spec(spec)
    except EncoderSpecError as error:
        raise typer.BadParameter(str(error)) from None
    return spec


EncoderSpec = Annotated[str, typer.Option("--encoder", help=f"text encoder of the bias embeddings: {SPEC_FORMS}",
                                          callback=encoder_spec)]


# --- a built-in benchmark's tags and relevance (`mavias data make`, `mavias bench`) --------------------------------
TagsOption = Annotated[str | None, typer.Option(
    "--tags", help="tagger (default: the benchmark's own image tagger, trained on images whose attributes are "
    "independent of the class) or oracle (the generator's attributes, some missed, some spurious)")]
RelevanceOption = Annotated[str | None, typer.Option(
    "--relevance", help="judge (default: the offline judge decides every (class, tag)), oracle (the ground truth), "
    "or a relevance table of yours for the benchmark's (class, tag) pairs")]
TaggerCheckpointOption = Annotated[Path | None, typer.Option(
    "--tagger-checkpoint", help="tag with this tagger (a tagger.pt of the same benchmark) instead of training one")]
LeakOption = Annotated[int, typer.Option("--leak", min=0, help="mark each class's K most class-specific defining "
                                         "tags irrelevant: a judge mistake, to stress-test the bias path")]
TaggerQualityOption = Annotated[str, typer.Option(
    "--tagger-quality", help="low, default or high: the tagger's target mean per-tag F1 (0.5, 0.7, 0.9)")]


def discovery_sources(*, tags: str | None = None, relevance: str | None = None, leak: int | None = 0,
                      tagger_quality: str | None = None, tagger_checkpoint: Path | None = None) -> Sources:
    """The sources the options name (unset ones: the benchmark's tagger and the offline judge)."""
    from mavias.core.synthetic import Sources

    if tags not in (None, "tagger", "oracle"):
        raise UserError(f"--tags {tags!r} is not a tag source", hint="use tagger or oracle")
    if relevance not in (None, "judge", "oracle") and not Path(relevance).is_file():
        raise UserError(f"--relevance {relevance} is neither judge, oracle nor a file",
                        hint="use judge, oracle or the path of a relevance table")
    if tagger_quality is not None:
        from mavias.core.synthetic.tagger import check_quality

        check_quality(tagger_quality)
    chosen = relevance if relevance in (None, "judge", "oracle") else Path(relevance)
    return Sources(tags=tags or "tagger", relevance=chosen or "judge", leak=leak or 0,
                   tagger_quality=tagger_quality or "default", tagger_checkpoint=tagger_checkpoint)


def parse_overrides(values: list[str]) -> dict:
    """``--set key=value`` pairs (values read as YAML: numbers, booleans, lists) as a dict of dotted keys."""
    pairs = {}
    for item in values:
        if "=" not in item:
            raise UserError(f"--set takes key=value, got {item!r}", hint="e.g. --set mavias.lam=0.4")
        key, value = item.split("=", 1)
        pairs[key] = yaml.safe_load(value)
    return pairs


def run_checkpoint(run: Path, criterion: str | None) -> Path:
    """The checkpoint of ``--run`` for ``--criterion`` (default: the run's own ``selection``)."""
    from mavias.core.train.checkpoints import CRITERIA, best_checkpoint
    from mavias.core.train.config import load_config

    if not run.is_dir():
        raise UserError(f"{run} is not a run folder", hint="pass the --out folder of `mavias train`")
    if not any(run.glob("*.pt")):  # before the criterion: no --criterion can help a folder without checkpoints
        raise UserError(f"{run} holds no checkpoint: it is not a run folder of `mavias train`, or the run has not "
                        "reached its first validation", hint="pass the --out folder of a trained run")
    if criterion is None:
        if not (run / "config.yaml").is_file():
            raise UserError(f"{run} holds no config.yaml to name its selection criterion",
                            hint=f"pass --criterion {'|'.join(CRITERIA)}")
        criterion = load_config(run / "config.yaml").selection
    checkpoint = best_checkpoint(run, criterion)
    if not checkpoint.is_file():
        raise UserError(f"{checkpoint} does not exist",
                        hint="train the run to its first validation, or pick another --criterion")
    return checkpoint


def prepare_data(manifest: Path, relevance: Path, tags: Path | None, workspace: Path, cfg: TrainConfig,
                 group_attrs: str, out: Path) -> PreparedData:
    """The images decoded, with their bias embeddings from the workspace's store (encoded there once)."""
    from mavias.core.discovery import Workspace as DiscoveryWorkspace
    from mavias.core.encode import make_encoder
    from mavias.core.relevance import load_relevance
    from mavias.core.tagging.base import read_tags
    from mavias.core.train.prepare import prepare_image_data

    encoder = make_encoder(cfg.encoder)
    data = prepare_image_data(
        manifest, relevance=load_relevance(relevance), tags_table=None if tags is None else read_tags(tags),
        encoder=encoder, store_dir=DiscoveryWorkspace(workspace).embeddings(encoder.encoder_id), config=cfg,
        group_attrs=[a for a in group_attrs.split(",") if a], quarantine_csv=out / "quarantine.csv",
    )
    if len(data.quarantined):
        warn([f"{len(data.quarantined)} image(s) left out, missing or unreadable: {out / 'quarantine.csv'} says why "
              "for each"])
    return data


def warn(warnings: list[str]) -> None:
    for warning in warnings:
        console.print(f"[bold red]warning:[/] {warning}", soft_wrap=True)


def counts_table(title: str, counts: dict[str, int]) -> Table:
    table = Table(title=title)
    table.add_column("count")
    table.add_column("value", justify="right")
    for name, value in counts.items():
        table.add_row(name, str(value))
    return table
