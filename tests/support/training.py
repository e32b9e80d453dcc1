"""Training helpers of the tests."""

from pathlib import Path

from mavias.core.train.config import TrainConfig
from mavias.core.train.data import SplitData
from mavias.core.train.recipe import resolve_recipe
from mavias.core.train.trainer import Trainer


def make_trainer(cfg: TrainConfig, train: SplitData, val: SplitData, classes: list[str], out_dir: Path,
                 **options) -> Trainer:
    """A trainer on the recipe resolved for this data: the explicit step the library's callers take first."""
    return Trainer(resolve_recipe(cfg, train, len(classes), run_dir=Path(out_dir)), train, val, classes, out_dir,
                   **options)


def erm_checkpoint(train: SplitData, val: SplitData, classes: list[str], out_dir: Path, cfg: TrainConfig) -> Path:
    """A trained vanilla model's checkpoint (FLAC-B's bias-capturing classifier), trained with ``cfg`` as ERM."""
    erm = cfg.model_copy(update={"method": "erm", "selection": "val_acc"})
    return make_trainer(erm, train, val, classes, out_dir, progress=False).fit().checkpoint("val_acc")
