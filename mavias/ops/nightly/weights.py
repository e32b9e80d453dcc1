"""Where a night's model weights are looked for, and which are missing: light enough for the preflight, which runs
before anything imports torch."""

from __future__ import annotations

from mavias.core.encode import parse_encoder_spec
from mavias.core.tagging.factory import TaggerSettings
from mavias.ops.nightly.config import NightlyConfig


def weights_dir(cfg: NightlyConfig) -> str | None:
    return None if cfg.discovery.weights_dir is None else str(cfg.discovery.weights_dir)


def missing_model_weights(cfg: NightlyConfig) -> list[str]:
    """What keeps the configured OpenCLIP tagger or text encoder from loading offline on this worker."""
    wanted = []
    if cfg.discovery.tagger == "openclip":
        settings = TaggerSettings(kind="openclip")
        wanted.append(("tagger", settings.model, settings.pretrained))
    spec = parse_encoder_spec(cfg.training.encoder)
    if spec.kind == "openclip":
        wanted.append(("text encoder", spec.model, spec.pretrained))
    if not wanted:
        return []
    from mavias.core.encode.openclip import missing_weights  # open_clip (seconds to import) only where it is used

    problems = [(what, missing_weights(model, pretrained, weights_dir(cfg))) for what, model, pretrained in wanted]
    return [f"the {what}'s {problem}; put the weights in discovery.weights_dir" for what, problem in problems if problem]
