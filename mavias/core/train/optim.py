"""Optimisers and learning-rate schedules; schedules step once per batch, so a resumed run continues them exactly."""

from __future__ import annotations

import math

import torch

from mavias.core.train.config import OptimConfig


def make_optimizer(o: OptimConfig, groups: list[dict]) -> torch.optim.Optimizer:
    if o.name == "sgd":
        return torch.optim.SGD(groups, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return torch.optim.AdamW(groups, lr=o.lr, weight_decay=o.weight_decay)
    return torch.optim.Adam(groups, lr=o.lr, weight_decay=o.weight_decay)


def batches_per_epoch(n: int, batch_size: int) -> int:
    """Batches of an epoch of ``n`` samples: a last batch of a single sample is dropped (one image cannot train a
    BatchNorm layer), so the count is what :func:`drop_last` makes of it."""
    return n // batch_size if drop_last(n, batch_size) else math.ceil(n / batch_size)


def drop_last(n: int, batch_size: int) -> bool:
    return n > batch_size and n % batch_size == 1


def step_thirds_milestones(epochs: int) -> list[int]:
    """Epochs after which ``step_thirds`` divides the lr by 10: after 1/3 and after 2/3 of the run (twice)."""
    return sorted({max(1, epochs // 3), max(1, 2 * epochs // 3)})


def schedule_factor(o: OptimConfig, step: int, epochs: int, steps_per_epoch: int) -> float:
    """The learning-rate multiplier before optimiser step ``step`` (0-based)."""
    if o.schedule == "step_thirds":
        passed = sum(step >= m * steps_per_epoch for m in step_thirds_milestones(epochs))
        return 0.1**passed
    if o.schedule == "cosine":
        total = max(1, epochs * steps_per_epoch)
        warmup = min(total - 1, round(o.warmup_fraction * total))
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    return 1.0


def make_scheduler(o: OptimConfig, optimizer: torch.optim.Optimizer, epochs: int,
                   steps_per_epoch: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule_factor(o, step, epochs, steps_per_epoch))
