"""A small trainer: seeded, resumable, with per-epoch validation, model selection, CSV and TensorBoard logs."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, RandomSampler, WeightedRandomSampler
from torch.utils.tensorboard import SummaryWriter

from mavias.core.devices import choose_device, native_bfloat16
from mavias.core.train.checkpoints import CRITERIA, EARLY_CHECKPOINT, best_checkpoint, early_epoch, epoch_path
from mavias.core.train.config import ConfigError, TrainConfig
from mavias.core.train.data import IndexedInputs, SplitData
from mavias.core.train.failures import explained_training_errors
from mavias.core.train.inference import predict_logits, to_model_input
from mavias.core.train.methods import Method, build_method
from mavias.core.train.model import MainModel, build_main_model
from mavias.core.train.optim import batches_per_epoch, drop_last, make_optimizer, make_scheduler
from mavias.core.train.recipe import ResolvedRecipe, as_recipe
from mavias.core.train.sanity import chance_warnings, check_finite, check_finite_weights
from mavias.core.train.selection import is_perfect, is_uninformative, selection_key, validation_scores
from mavias.core.train.warm import load_initial_weights
from mavias.utils.atomic import atomic_path, write_json
from mavias.utils.csvfile import write_csv
from mavias.utils.progress import progress_bar, progress_line

FALLBACK_CRITERION = "val_acc"


@dataclass
class TrainResult:
    out_dir: Path
    history: pd.DataFrame
    best: dict[str, dict]
    completed: bool
    warnings: list[str] = field(default_factory=list)  # a model a trivial rule explains (mavias.core.train.sanity)

    def checkpoint(self, criterion: str) -> Path:
        return best_checkpoint(self.out_dir, criterion)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


class Trainer:
    """Trains one run from a resolved recipe (:func:`~mavias.core.train.recipe.resolve_recipe`, or a complete
    config): constructing it never trains."""

    def __init__(
        self,
        settings: ResolvedRecipe | TrainConfig,
        train: SplitData,
        val: SplitData,
        classes: list[str],
        out_dir: str | Path,
        *,
        val_groups: pd.Series | None = None,
        progress: bool = True,
        keep_epochs: bool = False,
        reference: Path | None = None,
    ):
        self.train_split = train
        self.val_split = val
        self.classes = classes
        self.out_dir = Path(out_dir)
        self.val_groups = None if val_groups is None else np.asarray(val_groups)
        self.progress = progress
        self.keep_epochs = keep_epochs  # keep every epoch's main model, for the analyses of other criteria
        self.primary = True  # the one process that writes the run folder (rank 0 of a distributed run)
        self.recipe = as_recipe(settings)
        self.cfg = cfg = self.recipe.config
        self.device = choose_device(cfg.device)
        self.epoch = 0
        seed_everything(cfg.seed)
        self.model: MainModel = build_main_model(cfg.backbone, train.in_channels, len(classes)).to(self.device)
        self.channels_last = cfg.channels_last and self.model.image_input
        self.bfloat16 = cfg.amp and native_bfloat16(self.device)  # decided once, not queried every training step
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        if cfg.compile:
            self.model.backbone.compile()
        self.method: Method = build_method(cfg, self.model, train, reference)
        for module in self.method.modules().values():
            module.to(self.device)
        self.optimizer = self._build_optimizer()
        self.scheduler = self._build_scheduler()
        self.history: list[dict] = []
        self.best: dict[str, dict] = {}

    # --- construction -------------------------------------------------------------------------------------
    def _build_optimizer(self) -> torch.optim.Optimizer:
        return make_optimizer(self.cfg.optim, self.method.param_groups())

    def _build_scheduler(self) -> torch.optim.lr_scheduler.LRScheduler | None:
        if self.cfg.optim.schedule == "none":
            return None
        steps = batches_per_epoch(len(self.train_split), self.cfg.batch_size)
        return make_scheduler(self.cfg.optim, self.optimizer, self.cfg.epochs, steps)

    @property
    def precision(self) -> str:
        """The arithmetic of the training steps (a run's figures depend on it; validation is always float32)."""
        return "bfloat16 autocast" if self.bfloat16 else "float32"

    def _autocast(self):
        if self.bfloat16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _loader(self, epoch: int, weights: torch.Tensor | None) -> DataLoader:
        # A generator seeded by (seed, epoch) makes the sample order a function of the epoch alone, so a resumed
        # run sees exactly the batches an uninterrupted run would have seen.
        generator = torch.Generator().manual_seed(self.cfg.seed * 100_003 + epoch)
        data = IndexedInputs(self.train_split.inputs)
        if weights is not None:
            sampler = WeightedRandomSampler(weights, num_samples=len(weights), replacement=True, generator=generator)
        else:
            sampler = RandomSampler(data, generator=generator)
        return DataLoader(
            data,
            batch_size=self.cfg.batch_size,
            sampler=sampler,
            num_workers=self._num_workers(),
            pin_memory=self.device.type == "cuda",
            drop_last=drop_last(len(data), self.cfg.batch_size),
        )

    def _num_workers(self) -> int:
        if self.cfg.num_workers != "auto":
            return self.cfg.num_workers
        in_memory = getattr(self.train_split.inputs, "cache", None) is not None
        return 0 if self.device.type != "cuda" or in_memory else min(8, os.cpu_count() or 1)

    # --- checkpoints ---------------------------------------------------------------------------------------
    @property
    def last_path(self) -> Path:
        return self.out_dir / "last.pt"

    def _state(self) -> dict:
        return {
            "epoch": self.epoch,
            "modules": {k: m.state_dict() for k, m in self.method.modules().items()},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "method": self.method.state_dict(),
            "history": self.history,
            "best": self.best,
            "config": self.cfg.model_dump(mode="json"),
            "classes": self.classes,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else [],
        }

    def save_checkpoint(self) -> None:
        if not self.primary:
            return
        with atomic_path(self.last_path) as tmp:
            torch.save(self._state(), tmp)

    def load_checkpoint(self, path: Path) -> None:
        # on the CPU: modules and the optimizer move their state to their device as they load it, the methods keep
        # theirs on the CPU, and an RNG state must be a CPU tensor
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state["config"] != self.cfg.model_dump(mode="json"):
            raise ConfigError(f"{path} was written with another config; use a fresh output folder or the same config")
        for key, module in self.method.modules().items():
            module.load_state_dict(state["modules"][key])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.method.load_state_dict(state["method"])
        self.epoch, self.history, self.best = state["epoch"], state["history"], state["best"]
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") and self.device.type == "cuda" and len(state["cuda_rng"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self._mend_best_files()

    def _mend_best_files(self) -> None:
        """A best checkpoint a kill left behind ``last.pt`` (which names the epoch each must hold) is written again
        from the model ``last.pt`` holds, when that is the epoch it names."""
        for criterion, best in self.best.items():
            path = self.checkpoint_path(criterion)
            if best["epoch"] != self.epoch:
                continue
            held = torch.load(path, map_location="cpu", weights_only=True).get("epoch") if path.exists() else None
            if held != self.epoch:
                self._save_model(path, best["score"])

    def _best_key(self, criterion: str) -> tuple[float, float]:
        best = self.best.get(criterion)
        return (-1.0, -1.0) if best is None else selection_key(best["score"], best["val_acc"])

    def checkpoint_path(self, criterion: str) -> Path:
        return best_checkpoint(self.out_dir, criterion)

    def _save_model(self, path: Path, score: float) -> None:
        if not self.primary:
            return
        with atomic_path(path) as tmp:
            torch.save(
                {"model": self.model.state_dict(), "epoch": self.epoch, "score": score, "classes": self.classes,
                 "config": self.cfg.model_dump(mode="json")},
                tmp,
            )

    # --- loop ----------------------------------------------------------------------------------------------
    def _run_epoch(self, method: Method, epoch: int, optimizer: torch.optim.Optimizer, desc: str,
                   scheduler: torch.optim.lr_scheduler.LRScheduler | None = None) -> dict[str, float]:
        method.model.train()
        sums: dict[str, float] = {}
        batches = 0
        loader = self._loader(epoch, method.sampling_weights())
        for x, idx in progress_bar(loader, desc=desc, leave=False, enabled=self.progress):
            x = to_model_input(x, self.device)
            if self.channels_last and x.ndim == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            y = self.train_split.labels[idx].to(self.device)
            with self._autocast():
                loss, stats = self._loss(method, x, y, idx)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            check_finite(stats["loss"], epoch, optimizer.param_groups[0]["lr"])
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v
            batches += 1
        finite = all(bool(torch.isfinite(p).all()) for group in optimizer.param_groups for p in group["params"])
        check_finite_weights(finite, epoch, optimizer.param_groups[0]["lr"])
        return {f"train_{k}": v / max(batches, 1) for k, v in sums.items()}

    def _loss(self, method: Method, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, dict]:
        return method.loss(x, y, idx)

    def _fit_plain(self, model: MainModel, epochs: int) -> None:
        """Train a plain ERM model (JTT's identification stage) with the same data pipeline."""
        erm = Method(self.cfg, model, self.train_split)
        opt = make_optimizer(self.cfg.optim, erm.param_groups())
        for e in range(1, epochs + 1):
            self._run_epoch(erm, -e, opt, f"jtt identification {e}/{epochs}")

    def _validate(self) -> dict[str, float]:
        logits = predict_logits(self.model, self.val_split, batch_size=max(256, self.cfg.batch_size))
        correct = (logits.argmax(1) == self.val_split.labels).numpy()
        true_groups = None if self.val_split.groups is None else self.val_split.groups.numpy()
        return validation_scores(correct, self.val_split.labels.numpy(), self.val_groups, true_groups)

    def _fall_back_where_uninformative(self) -> None:
        """A criterion constant over all epochs selected nothing: use the val_acc checkpoint and say so."""
        for criterion in CRITERIA:
            best = self.best.get(criterion)
            if criterion == FALLBACK_CRITERION or best is None or "fallback" in best:
                continue
            if is_uninformative([row[criterion] for row in self.history if criterion in row]):
                if self.primary:
                    with atomic_path(self.checkpoint_path(criterion)) as tmp:
                        shutil.copyfile(self.checkpoint_path(FALLBACK_CRITERION), tmp)
                self.best[criterion] = {**self.best[FALLBACK_CRITERION], "score": best["score"],
                                        "fallback": FALLBACK_CRITERION}

    def fit(self, *, resume: bool = True, stop_after: int | None = None) -> TrainResult:
        """Train to ``cfg.epochs``; with ``stop_after`` run at most that many epochs now (time-sliced jobs). An error
        that escapes is :class:`~mavias.core.train.failures.TrainingFailed`, one readable line."""
        with explained_training_errors(self.cfg.method, self.out_dir, lambda: self.epoch):
            return self._fit(resume=resume, stop_after=stop_after)

    def _fit(self, *, resume: bool, stop_after: int | None) -> TrainResult:
        if self.primary:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.recipe.write(self.out_dir)
        if resume and self.last_path.exists():
            self.load_checkpoint(self.last_path)
        else:
            seed_everything(self.cfg.seed)
            if self.cfg.init_from:
                load_initial_weights(self.model, self.cfg.init_from, self.classes)
        self.method.prepare(self._fit_plain)
        writer = SummaryWriter(str(self.out_dir / "tensorboard")) if self.primary else None
        run_epochs = 0
        if self.progress and not self.finished:
            progress_line(self._plan_line())
        while not self.finished and (stop_after is None or run_epochs < stop_after):
            self.epoch += 1
            start = time.perf_counter()
            row = self._run_epoch(self.method, self.epoch, self.optimizer,
                                  f"{self.cfg.method} epoch {self.epoch}/{self.cfg.epochs}", self.scheduler)
            seconds = time.perf_counter() - start
            if self.epoch % (self.cfg.validate_every or 1) == 0 or self.epoch == self.cfg.epochs:
                row.update(self._validate())
            row.update({"epoch": self.epoch, "seconds": seconds, "lr": self.optimizer.param_groups[0]["lr"]})
            if self.keep_epochs:
                self._save_model(epoch_path(self.out_dir, self.epoch), row.get("val_acc", float("nan")))
            if self.epoch == early_epoch(self.cfg.epochs):
                self._save_model(self.out_dir / EARLY_CHECKPOINT, row.get("val_acc", float("nan")))
            self._record(row, writer)
            if self.progress:
                progress_line(epoch_line(self.cfg.method, self.cfg.epochs, row))
            run_epochs += 1
        if writer is not None:
            writer.close()
        if self.progress and self.finished and self.epoch < self.cfg.epochs:
            progress_line(f"{self.cfg.method}: stopped after epoch {self.epoch} of {self.cfg.epochs}: {self._stop_reason()}")
        return self._finish()

    def _stop_reason(self) -> str:
        if not is_perfect(self._selection_scores()):
            return f"no better {self.cfg.selection} in its last {self.cfg.patience} validations"
        scores = "val_acc is" if self.cfg.selection == "val_acc" else f"{self.cfg.selection} and val_acc are"
        return f"{scores} perfect, nothing later can be selected"

    @property
    def finished(self) -> bool:
        """Trained to its last epoch, or stopped early: ``patience`` validations in a row (in the second half of the
        run) found no better selection score than an earlier one, or the score is perfect (only a strictly better one
        replaces the best, so later epochs could not change the selected model; ``early.pt`` is kept first).
        Decided from the history alone, so a resumed run stops where an uninterrupted one did."""
        if self.epoch >= self.cfg.epochs:
            return True
        scores = self._selection_scores()
        if not self.cfg.patience or not scores:
            return False
        if is_perfect(scores) and self.epoch >= early_epoch(self.cfg.epochs):
            return True
        if 2 * self.epoch < self.cfg.epochs:
            return False
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # the first of the best
        return len(scores) - 1 - best >= self.cfg.patience

    def _selection_scores(self) -> list[tuple[float, float]]:
        return [selection_key(row[self.cfg.selection], row["val_acc"]) for row in self.history
                if self.cfg.selection in row]

    def _plan_line(self) -> str:
        steps = batches_per_epoch(len(self.train_split), self.cfg.batch_size)
        start = f", resuming after epoch {self.epoch}" if self.epoch else ""
        start += f", starting from {self.cfg.init_from}" if self.cfg.init_from and not self.epoch else ""
        return (f"{self.cfg.method}: {self.cfg.epochs} epochs of {steps} batches of {self.cfg.batch_size}, "
                f"lr {self.cfg.optim.lr:.3g} ({self.recipe.notes.get('optim.lr', 'as configured')}), {self.precision}"
                f"{start}")

    def _record(self, row: dict, writer: SummaryWriter) -> None:
        self.history.append(row)
        improved = [criterion for criterion in CRITERIA
                    if criterion in row and selection_key(row[criterion], row["val_acc"]) > self._best_key(criterion)]
        for criterion in improved:
            self.best[criterion] = {"epoch": self.epoch, "score": row[criterion], "val_acc": row["val_acc"]}
        self.save_checkpoint()  # first: it names the epoch each best file holds (a kill before they are written
        for criterion in improved:  # is mended on resume)
            self._save_model(self.checkpoint_path(criterion), row[criterion])
        self._log(writer, row)

    def _finish(self) -> TrainResult:
        warnings: list[str] = []
        completed = self.finished
        if completed:
            self._fall_back_where_uninformative()
            self.save_checkpoint()
            best = max((row for row in self.history if "val_acc" in row), key=lambda row: row["val_acc"])
            warnings = chance_warnings(best["val_acc"], best["val_balanced"], len(self.classes), self.val_split.frame)
        result = TrainResult(self.out_dir, pd.DataFrame(self.history), dict(self.best), completed, warnings)
        fallbacks = {c: b["fallback"] for c, b in self.best.items() if "fallback" in b}
        stopped = self.epoch if completed and self.epoch < self.cfg.epochs else None
        if self.primary:
            write_json(self.out_dir / "train_summary.json", {"best": self.best, "completed": completed,
                                                             "epochs": self.epoch, "stopped_early_at": stopped,
                                                             "classes": self.classes, "precision": self.precision,
                                                             "channels_last": self.channels_last,
                                                             "selection_fallbacks": fallbacks, "warnings": warnings})
        return result

    def _log(self, writer: SummaryWriter | None, row: dict) -> None:
        if not self.primary:
            return
        write_csv(pd.DataFrame(self.history), self.out_dir / "metrics.csv")
        for key, value in row.items():
            if key != "epoch":
                writer.add_scalar(key, value, row["epoch"])


EPOCH_LINE_KEYS = ("train_loss", "val_acc", "val_robust", "val_tag_wg")


def epoch_line(method: str, epochs: int, row: dict) -> str:
    """One epoch as one line of a log: its losses, validation scores, learning rate and time."""
    scores = ", ".join(f"{key} {row[key]:.4f}" for key in EPOCH_LINE_KEYS if key in row)
    return f"{method} epoch {row['epoch']}/{epochs}: {scores}, lr {row['lr']:.3g}, {row['seconds']:.1f} s"
