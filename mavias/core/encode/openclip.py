"""OpenCLIP, loaded offline-first, and the OpenCLIP text encoder for bias prompts.

Weights come from a local checkpoint file, or from the open_clip / Hugging Face hub cache when ``pretrained`` is a
tag; nothing is downloaded unless ``allow_download`` is set. ``pretrained=None`` builds a randomly initialised model
from a fixed seed (tests, benchmarks), so its id and therefore every cache key stay stable across processes.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import open_clip
import torch
from open_clip.constants import HF_SAFE_WEIGHTS_NAME, HF_WEIGHTS_NAME
from open_clip.tokenizer import SimpleTokenizer

from mavias.core.devices import choose_device
from mavias.core.encode.base import TokenLimitCounts, bias_prompt
from mavias.core.encode.defaults import ENCODE_MODES, OPENCLIP_MODEL, OPENCLIP_PRETRAINED
from mavias.errors import UserError
from mavias.utils.disk import sha256_file
from mavias.utils.progress import progress_bar
from mavias.utils.torchfile import TORCH_LOAD_ERRORS, load_error_reason

_EMPTY_PROMPT = bias_prompt([])
_PROMPT_PREFIX = "a photo of "


class WeightsNotFoundError(UserError, FileNotFoundError):
    """OpenCLIP weights that are neither a local file nor in the local cache (and downloading is not allowed)."""


def _hub_candidates(hf_hub: str) -> tuple[str, list[str]]:
    """Repo id and file names open_clip would fetch for a ``hf_hub`` entry ('org/repo/' or 'org/repo/file')."""
    repo_id, filename = os.path.split(hf_hub)
    filename = filename or HF_WEIGHTS_NAME
    if filename == HF_WEIGHTS_NAME:
        return repo_id, [HF_SAFE_WEIGHTS_NAME, filename]
    if filename.endswith((".bin", ".pth")):
        return repo_id, [filename[:-4] + ".safetensors", filename]
    return repo_id, [filename]


def _cached_checkpoint(cfg: dict, weights_dir: str | None) -> str | None:
    """The locally cached checkpoint of a pretrained tag, without touching the network."""
    if cfg.get("file"):
        return cfg["file"] if os.path.isfile(cfg["file"]) else None
    if cfg.get("hf_hub"):
        from huggingface_hub import try_to_load_from_cache

        repo_id, names = _hub_candidates(cfg["hf_hub"])
        for name in names:
            path = try_to_load_from_cache(repo_id, name, cache_dir=weights_dir)
            if isinstance(path, str):
                return path
    if cfg.get("url"):
        path = Path(weights_dir or "~/.cache/clip").expanduser() / os.path.basename(cfg["url"])
        if path.is_file():
            return str(path)
    return None


def _other_ways(model: str, cfg: dict) -> str:
    """The ways forward without downloading: a checkpoint file, one's own tags, or random weights."""
    where = [f"Hugging Face repo {_hub_candidates(cfg['hf_hub'])[0]}"] if cfg.get("hf_hub") else []
    where += [f"URL {cfg['url']}"] if cfg.get("url") else []
    # a bare checkpoint file carries no activation setting: OpenAI weights need the QuickGELU variant of the model
    variant = f"{model}-quickgelu" if cfg.get("quick_gelu") else model
    architecture = f" --tagger-model {variant}" if variant != model else ""
    return (f"fetch the checkpoint yourself (from {' or '.join(where) or 'its publisher'}) and pass the file:"
            f"{architecture} --pretrained /path/to/checkpoint for the tagger, --encoder openclip:{variant}//path/to/"
            "checkpoint for the text encoder; or bring your own tags (mavias data import imagefolder "
            "ROOT --tags tags.csv; `mavias audit --tags`); --pretrained none (with --allow-random-tags in `mavias "
            "audit`) runs a randomly initialised model, whose tags are noise")


def _missing_weights_message(model: str, pretrained: str, cfg: dict, weights_dir: str | None) -> str:
    return (
        f"OpenCLIP weights {model!r}/{pretrained!r} are not in the local cache "
        f"({weights_dir or 'default Hugging Face cache and ~/.cache/clip'}); nothing is downloaded by default.\n"
        f"Either run once with downloading allowed (--allow-download), or {_other_ways(model, cfg)}"
    )


def _download(model: str, pretrained: str, cfg: dict, weights_dir: str | None) -> str:
    try:
        return open_clip.download_pretrained(cfg, cache_dir=weights_dir)
    except (OSError, RuntimeError, ValueError) as err:  # no network, hub errors, a broken partial download
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise WeightsNotFoundError(f"could not download the OpenCLIP weights {model!r}/{pretrained!r} ({reason}). "
                                   f"Check the connection, or {_other_ways(model, cfg)}") from err


def missing_weights(model: str, pretrained: str | None, weights_dir: str | None) -> str | None:
    """Why ``model``/``pretrained`` cannot load offline from ``weights_dir`` (or the default caches), or None when
    it can (a preflight check: nothing is loaded or downloaded)."""
    try:
        _locate_weights(model, pretrained, weights_dir, allow_download=False, seed=0)
    except WeightsNotFoundError as err:
        return " ".join(str(err).split())
    return None


@dataclass(frozen=True)
class _Weights:
    checkpoint: str | None  # local file; None = random init
    weights_id: str
    tag_cfg: dict  # open_clip's pretrained config of a tag (quick_gelu, mean/std, ...); empty otherwise


@contextlib.contextmanager
def _readable_checkpoint(checkpoint: str | None, model: str) -> Iterator[None]:
    """A checkpoint that is damaged, of another kind or of another architecture: one line naming it."""
    try:
        yield
    except TORCH_LOAD_ERRORS as error:
        if checkpoint is None or isinstance(error, torch.OutOfMemoryError):
            raise
        raise UserError(f"{checkpoint} cannot be loaded as {model} weights ({load_error_reason(error)})",
                        hint=f"pass --pretrained an OpenCLIP {model} checkpoint, or its pretrained tag") from None


def _is_random(pretrained: str | None) -> bool:
    return pretrained is None or pretrained.lower() in ("", "none", "random")


def weights_identity(model: str, pretrained: str | None, seed: int = 0) -> str:
    """What names ``model``'s weights in a model id, checked without loading or finding them: a random init by its
    seed, a file by its digest, a pretrained tag as itself."""
    if model not in open_clip.list_models():
        close = difflib.get_close_matches(model.replace("/", "-"), open_clip.list_models(), n=3, cutoff=0.6)
        raise WeightsNotFoundError(f"{model!r} is not an OpenCLIP architecture" + (
            f" (closest: {', '.join(close)})" if close else "") + "; open_clip.list_models() lists them all")
    if _is_random(pretrained):
        return f"random-init-seed{seed}"
    if os.path.isfile(pretrained):
        return f"file-{sha256_file(pretrained)[:16]}"
    if not open_clip.get_pretrained_cfg(model, pretrained):
        known = ", ".join(open_clip.list_pretrained_tags_by_model(model)) or "none"
        raise WeightsNotFoundError(f"{pretrained!r} is neither a file nor a pretrained tag of {model} (tags: {known})")
    return pretrained


def embedding_dim(model: str) -> int:
    """The width of ``model``'s embeddings, from its config (nothing loaded)."""
    return int(open_clip.get_model_config(model)["embed_dim"])


def _locate_weights(
    model: str, pretrained: str | None, weights_dir: str | None, allow_download: bool, seed: int
) -> _Weights:
    identity = weights_identity(model, pretrained, seed)
    if _is_random(pretrained):
        return _Weights(None, identity, {})
    if os.path.isfile(pretrained):
        return _Weights(pretrained, identity, {})
    cfg = open_clip.get_pretrained_cfg(model, pretrained)
    if allow_download:
        return _Weights(_download(model, pretrained, cfg, weights_dir), pretrained, cfg)
    checkpoint = _cached_checkpoint(cfg, weights_dir)
    if checkpoint is None:
        raise WeightsNotFoundError(_missing_weights_message(model, pretrained, cfg, weights_dir))
    return _Weights(checkpoint, pretrained, cfg)


@contextlib.contextmanager
def _hub_files(model: str, allow_download: bool) -> Iterator[None]:
    """The Hugging Face files an architecture needs besides its weights (an HF text tower's config, its tokenizer):
    read from the local cache only unless downloads are allowed, and a missing one named in one line. The switch is
    huggingface_hub's own, read at each request (its environment variable is read once, when it is imported)."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = before or not allow_download
    try:
        yield
    except OSError as error:
        if error.errno is not None or isinstance(error, WeightsNotFoundError):  # a file system fault, or named already
            raise
        raise WeightsNotFoundError(
            f"{model} needs Hugging Face files (its text tower's configuration or tokenizer) that are not in the local "
            "cache, and downloads are not allowed",
            hint="pass --allow-download once where the hub is reachable (they are cached under $HF_HOME), or choose "
                 "an architecture with open_clip's own tokenizer (e.g. ViT-L-14)") from None
    finally:
        constants.HF_HUB_OFFLINE = before


def _token_length(tokenizer, text: str) -> int:
    if isinstance(tokenizer, SimpleTokenizer):
        return len(tokenizer.encode(text)) + 2  # start and end tokens
    return len(tokenizer.tokenizer(text)["input_ids"])  # HF-backed tokenizers wrap a transformers tokenizer


class OpenClip:
    """One loaded OpenCLIP model with its image preprocessing and tokenizer."""

    def __init__(
        self,
        model: str = OPENCLIP_MODEL,
        pretrained: str | None = OPENCLIP_PRETRAINED,
        *,
        device: str = "auto",
        weights_dir: str | None = None,
        allow_download: bool = False,
        seed: int = 0,
    ):
        weights = _locate_weights(model, pretrained, weights_dir, allow_download, seed)
        self.device = choose_device(device)
        self.model_name = model
        self.weights_id = weights.weights_id
        self.random_weights = weights.checkpoint is None  # untrained: what it says of an image is noise
        with torch.random.fork_rng(devices=[]), _readable_checkpoint(weights.checkpoint, model), \
                _hub_files(model, allow_download):
            torch.manual_seed(seed)
            self.model, _, self.preprocess = open_clip.create_model_and_transforms(
                model,
                pretrained=weights.checkpoint,
                device="cpu",  # moved below, outside the checkpoint's errors: a device fault is not the file's
                force_quick_gelu=bool(weights.tag_cfg.get("quick_gelu", False)),
                image_mean=weights.tag_cfg.get("mean"),
                image_std=weights.tag_cfg.get("std"),
                image_interpolation=weights.tag_cfg.get("interpolation"),
                image_resize_mode=weights.tag_cfg.get("resize_mode"),
            )
        self.model.to(self.device).eval()
        with _hub_files(model, allow_download):
            self.tokenizer = open_clip.get_tokenizer(model)
        self.context_length: int = self.tokenizer.context_length
        self.dim = embedding_dim(model)

    @property
    def model_id(self) -> str:
        return f"open_clip:{self.model_name}:{self.weights_id}"

    def token_length(self, text: str) -> int:
        return _token_length(self.tokenizer, text)

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")

    @torch.inference_mode()
    def encode_text(self, texts: list[str], *, batch_size: int = 256, progress: str | None = None) -> np.ndarray:
        """L2-normalised float32 text embeddings; texts beyond the context window are cut by the tokenizer. With
        ``progress`` (its description) a bar counts the texts."""
        chunks = []
        starts = range(0, len(texts), batch_size)
        for start in progress_bar(starts, desc=progress, unit="batch", enabled=progress is not None):
            tokens = self.tokenizer(texts[start : start + batch_size]).to(self.device)
            with self._autocast():
                chunks.append(self.model.encode_text(tokens, normalize=True).float().cpu().numpy())
        return np.concatenate(chunks) if chunks else np.zeros((0, self.dim), dtype=np.float32)

    @torch.inference_mode()
    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised float32 image embeddings of a preprocessed batch, on the model's device."""
        with self._autocast():
            return self.model.encode_image(images.to(self.device), normalize=True).float()


def _prompt_tags(prompt: str) -> list[str] | None:
    """The tags of a :func:`bias_prompt`, or ``None`` for free text."""
    if prompt == _EMPTY_PROMPT:
        return []
    if prompt.startswith(_PROMPT_PREFIX):
        return prompt[len(_PROMPT_PREFIX) :].split(", ")
    return None


class OpenClipTextEncoder:
    """TextEncoder over OpenCLIP's text tower.

    ``collective`` (paper default): one embedding of "a photo of t1, ..., tk". A prompt longer than the context
    window is split into consecutive chunks of its sorted tags that each fit, every chunk is encoded as its own
    "a photo of ..." prompt, and the chunk embeddings are averaged weighted by their tag counts, then L2-normalised.
    ``separate`` (paper ablation): the mean of the embeddings of "a photo of {tag}" for each tag.
    """

    def __init__(
        self,
        model: str = OPENCLIP_MODEL,
        pretrained: str | None = OPENCLIP_PRETRAINED,
        *,
        device: str = "auto",
        mode: str = "collective",
        weights_dir: str | None = None,
        allow_download: bool = False,
        clip: OpenClip | None = None,
    ):
        if mode not in ENCODE_MODES:
            raise ValueError(f"mode must be one of {ENCODE_MODES}, got {mode!r}")
        self._clip = clip
        self._load = functools.partial(OpenClip, model, pretrained, device=device, weights_dir=weights_dir,
                                       allow_download=allow_download)
        self._model_id = clip.model_id if clip else f"open_clip:{model}:{weights_identity(model, pretrained)}"
        self._dim = clip.dim if clip else embedding_dim(model)
        self.mode = mode
        self.token_limit = TokenLimitCounts()

    @property
    def clip(self) -> OpenClip:
        """The model, loaded when a prompt is first encoded: training on stored embeddings needs no weights."""
        if self._clip is None:
            self._clip = self._load()
        return self._clip

    @property
    def encoder_id(self) -> str:
        return f"{self._model_id}:{self.mode}"

    @property
    def dim(self) -> int:
        return self._dim

    def _fits(self, text: str) -> bool:
        return self.clip.token_length(text) <= self.clip.context_length

    def chunk_tags(self, tags: list[str]) -> list[list[str]]:
        """Consecutive runs of ``tags`` whose prompts each fit the context window."""
        chunks: list[list[str]] = [[]]
        for tag in tags:
            if chunks[-1] and not self._fits(bias_prompt([*chunks[-1], tag])):
                chunks.append([])
            chunks[-1].append(tag)
        return chunks

    def _plan(self, prompt: str) -> list[tuple[str, int]]:
        """The texts to encode for one prompt, with their weights in its average."""
        tags = _prompt_tags(prompt)
        if self.mode == "separate" and tags:
            plan = [(bias_prompt([tag]), 1) for tag in tags]
        elif tags is None or self._fits(prompt):
            plan = [(prompt, 1)]
        else:
            chunks = self.chunk_tags(tags)
            self.token_limit.over_limit += 1
            self.token_limit.chunks += len(chunks)
            plan = [(bias_prompt(chunk), len(chunk)) for chunk in chunks]
        self.token_limit.truncated += sum(not self._fits(text) for text, _ in plan)
        return plan

    def encode(self, prompts: list[str]) -> np.ndarray:
        plans = [self._plan(p) for p in prompts]
        self.token_limit.prompts += len(prompts)
        texts = sorted({text for plan in plans for text, _ in plan})
        vectors = dict(zip(texts, self.clip.encode_text(texts)))
        out = np.zeros((len(prompts), self.dim), dtype=np.float32)
        for i, plan in enumerate(plans):
            mean = np.average([vectors[t] for t, _ in plan], axis=0, weights=[w for _, w in plan])
            out[i] = mean / max(np.linalg.norm(mean), 1e-12)
        return out
