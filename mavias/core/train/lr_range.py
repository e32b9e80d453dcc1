"""The learning-rate range test (Smith 2017) with torch-lr-finder: the loss over ``steps`` batches while the learning
rate grows exponentially from ``start`` to ``end``. The suggestion is a tenth of the rate at the upper end of the
smoothed loss's valley, at most three times a tenth of the rate at its minimum (fastai's "minimum" rule, which it
equals where the minimum is sharp). Where the loss lies flat over a decade, the minimum's position is noise: on
digit-backgrounds it put the rate between 0.020 and 0.142 over five seeds of one dataset, and MAVias-PoE stalled at
0.020; the valley's upper end without the cap put one shape-colours seed at 0.215, where MAVias-PoE's bias and main
logits ran away together (BENCHMARKS.md, "The range test's valley"). The steepest descent, the other common rule,
falls on the first, easiest drop of the loss where a shortcut is learned within a few steps (on synthetic-scenes it
chose 0.0035, at which the bias projection of MAVias hardly moved), so it is recorded, not used."""

from __future__ import annotations

import contextlib
import copy
import io
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
import torch_lr_finder.lr_finder as lr_finder_module
from torch.utils.data import DataLoader
from torch_lr_finder import LRFinder, TrainDataLoaderIter

from mavias.core.train.data import SplitData
from mavias.core.train.inference import to_model_input
from mavias.core.train.model import MainModel
from mavias.utils.progress import progress_bar

SKIP_START, SKIP_END = 10, 5  # torch-lr-finder's own suggestion skips these points: too noisy, or diverging
VALLEY_CAP = 3.0  # times the minimum's rate: the valley's upper end is not followed further
VALLEY_TOLERANCE = 0.1  # of the loss's drop: the valley's loss lies this close to its minimum
MIN_RELATIVE_DROP = 0.02  # a loss that never falls 2% below its start says nothing about the learning rate

# torch-lr-finder draws its own tqdm bar and has no switch for it: it follows the package's policy instead (a live
# bar on a terminal, nothing but the result in a log)
lr_finder_module.tqdm = lambda steps: progress_bar(steps, desc="learning-rate range test", unit="step", leave=False)


@dataclass
class RangeTest:
    lrs: list[float]
    losses: list[float]
    suggestion: float | None  # None: the test could not tell (the loss never fell, or diverged at once)
    reason: str
    steps: int = field(default=0)
    steepest: float | None = None  # the steepest-descent rate, for the record


class _Batches(TrainDataLoaderIter):
    def __init__(self, loader: DataLoader, split: SplitData, device: torch.device):
        super().__init__(loader)
        self.split, self.device = split, device

    def inputs_labels_from_batch(self, batch):
        x, idx = batch
        return to_model_input(x, self.device), self.split.labels[idx]


def range_test(model: MainModel, optimizer: torch.optim.Optimizer, loader: DataLoader, split: SplitData,
               device: torch.device, *, start: float, end: float, steps: int) -> RangeTest:
    """Run the test on a copy of ``model`` (the model and optimiser are left as they were)."""
    model = copy.deepcopy(model)
    optimizer = type(optimizer)(model.parameters(), **optimizer.defaults)
    finder = LRFinder(model, optimizer, _FloatCrossEntropy(), device=device)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its bar and prints
        finder.range_test(_Batches(loader, split, device), start_lr=start, end_lr=end, num_iter=steps,
                          diverge_th=4)
    return from_curve(list(finder.history["lr"]), list(finder.history["loss"]), steps)


def from_curve(lrs: list[float], losses: list[float], steps: int) -> RangeTest:
    """A test's outcome from its curve under the rules in force (a cached curve may predate a change of rule)."""
    lrs_array, losses_array = np.asarray(lrs), np.asarray(losses)
    suggestion, reason = suggest(lrs_array, losses_array)
    return RangeTest(lrs, losses, suggestion, reason, steps, steepest(lrs_array, losses_array))


def _usable(losses: np.ndarray) -> slice | None:
    """The points between the noisy start and the diverging end, or None when the loss diverged there."""
    usable = slice(SKIP_START, max(SKIP_START + 2, len(losses) - SKIP_END))
    if len(losses) < SKIP_START + 3 or not np.isfinite(losses[usable]).all():
        return None
    return usable


def suggest(lrs: np.ndarray, losses: np.ndarray) -> tuple[float | None, str]:
    """A tenth of the rate at the upper end of the smoothed loss's valley, at most ``VALLEY_CAP`` times a tenth of the
    minimum's rate, or None with the reason the test cannot tell."""
    usable = _usable(losses)
    if usable is None:
        return None, f"the loss diverged after {len(losses)} steps (at lr {lrs[-1]:.2g})"
    drop = 1 - losses[usable].min() / losses[0]
    if drop < MIN_RELATIVE_DROP:
        return None, f"the loss never fell (best {drop:.1%} below its start) between lr {lrs[0]:.2g} and {lrs[-1]:.2g}"
    best = usable.start + int(losses[usable].argmin())
    end = _valley_end(losses, best, usable.stop)
    rate = min(lrs[end], VALLEY_CAP * lrs[best])
    where = "the upper end of the smoothed loss's valley" if rate == lrs[end] else f"{VALLEY_CAP:g} x its lowest point"
    return float(rate / 10), (f"lr range test: a tenth of lr {rate:.3g}, {where} (the valley from its lowest point at "
                              f"lr {lrs[best]:.3g} to lr {lrs[end]:.3g}; {len(losses)} steps from {lrs[0]:.2g} to "
                              f"{lrs[-1]:.2g})")


def _valley_end(losses: np.ndarray, best: int, stop: int) -> int:
    """The last point after the minimum of the stretch whose loss stays within ``VALLEY_TOLERANCE`` of the drop (the
    first loss minus the minimum) above the minimum."""
    within = losses[best] + VALLEY_TOLERANCE * (losses[0] - losses[best])
    end = best
    while end + 1 < stop and losses[end + 1] <= within:
        end += 1
    return end


def steepest(lrs: np.ndarray, losses: np.ndarray) -> float | None:
    """The rate where the smoothed loss fell fastest."""
    usable = _usable(losses)
    return None if usable is None else float(lrs[usable.start + int(np.gradient(losses[usable]).argmin())])


class _FloatCrossEntropy(torch.nn.Module):
    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), y)
