"""Data-parallel training over N processes with DistributedDataParallel, started by torch's own launcher
(``torch.distributed.run``, elastic): NCCL with one GPU per process, gloo on CPU.

- The launching process writes the job (prepared splits, config, run folder) to a temporary folder and runs
  ``python -m torch.distributed.run --standalone --nproc-per-node N -m mavias.core.train.distributed JOB``.
- Every rank walks the same global batches (the sampler is seeded by (seed, epoch)) and trains on its share of each,
  so the global batch, the steps per epoch, the learning-rate schedule and the sample order are a 1-process run's;
  DDP averages the gradients. BatchNorm becomes SyncBatchNorm on GPUs; gloo has none, so on CPU each rank normalises
  its own share (models without BatchNorm train as in one process, up to the order of float additions).
- The recipe is resolved before the launch (:func:`~mavias.core.train.recipe.resolve_recipe`) and travels in the
  job; rank 0 is the only writer of the run folder (checkpoints, config.yaml, recipe.json, metrics, summary); every
  rank validates the (identical) model, so all take the same decisions.
- Resume: every rank reads ``last.pt``; DDP then broadcasts rank 0's weights.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, Sampler

from mavias.core.devices import choose_device
from mavias.core.train.config import TrainConfig
from mavias.core.train.methods import Method
from mavias.core.train.prepare import PreparedData
from mavias.core.train.recipe import ResolvedRecipe, as_recipe
from mavias.core.train.sanity import TrainingDiverged
from mavias.core.train.trainer import Trainer, TrainResult
from mavias.errors import UserError
from mavias.utils.csvfile import read_csv

# Their losses are means of per-sample terms (MAVias's batch alignment takes the global batch's norms) and their state
# does not follow the batches: a rank's share of a batch trains as the whole batch would. GroupDRO's group weights and
# LfF's loss averages follow every batch, FLAC's and DebiAN's losses couple the samples of a batch.
DATA_PARALLEL_METHODS = ("erm", "mavias", "jtt", "sd")
JOB_NAME = "job.pt"
ERROR_NAME = "error-rank{rank}.txt"


class RankShare(Sampler[list[int]]):
    """This rank's share (every ``world``-th sample) of each global batch; a last batch smaller than the number of
    ranks is skipped by all of them, as every rank must take every step."""

    def __init__(self, batches: BatchSampler, rank: int, world: int):
        self.batches, self.rank, self.world = batches, rank, world

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches:
            if len(batch) >= self.world:
                yield batch[self.rank :: self.world]

    def __len__(self) -> int:
        return len(self.batches)


class _MethodLoss(nn.Module):
    """A method's loss as one module holding its trainable modules, so that DDP sees the forward and the gradients."""

    def __init__(self, method: Method):
        super().__init__()
        self.parts = nn.ModuleDict(method.modules())
        self.method = method

    def forward(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, dict]:
        return self.method.loss(x, y, idx)


class DistributedTrainer(Trainer):
    """The :class:`Trainer` of one rank (the process group is initialised)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.primary = self.rank == 0
        if self.device.type == "cuda":
            for module in self.method.modules().values():
                nn.SyncBatchNorm.convert_sync_batchnorm(module)  # in place below the root; same parameters
        self._wrapped: dict[int, tuple[Method, DistributedDataParallel]] = {}

    def _loader(self, epoch: int, weights: torch.Tensor | None) -> DataLoader:
        loader = super()._loader(epoch, weights)
        return DataLoader(loader.dataset, batch_sampler=RankShare(loader.batch_sampler, self.rank, self.world),
                          num_workers=loader.num_workers, pin_memory=loader.pin_memory)

    def _loss(self, method: Method, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, dict]:
        if id(method) not in self._wrapped:  # the method's modules, then JTT's identification model, if any
            ids = [torch.cuda.current_device()] if self.device.type == "cuda" else None
            self._wrapped[id(method)] = (method, DistributedDataParallel(_MethodLoss(method), device_ids=ids,
                                                                         find_unused_parameters=True))
        loss, stats = self._wrapped[id(method)][1](x, y, idx)
        values = torch.tensor(list(stats.values()), dtype=torch.float64, device=self.device)
        dist.all_reduce(values)  # the logged statistics are the mean over the ranks' shares
        return loss, dict(zip(stats, (values / self.world).tolist(), strict=True))


def check_supported(cfg: TrainConfig, nproc: int) -> None:
    if nproc < 1:
        raise UserError(f"--nproc must be at least 1, got {nproc}")
    if nproc > 1 and cfg.method not in DATA_PARALLEL_METHODS:
        raise UserError(f"method {cfg.method} cannot train data-parallel (its loss or state depends on the whole "
                        f"batch); use --nproc 1, or one of {', '.join(DATA_PARALLEL_METHODS)}")
    if nproc > 1 and choose_device(cfg.device).type == "cuda" and nproc > torch.cuda.device_count():
        raise UserError(f"--nproc {nproc} needs {nproc} GPUs (one per process), this machine has "
                        f"{torch.cuda.device_count()}; lower --nproc or set device=cpu")


def fit_distributed(data: PreparedData, settings: ResolvedRecipe | TrainConfig, out_dir: str | Path, nproc: int, *,
                    val_groups: pd.Series | None = None, keep_epochs: bool = False,
                    stop_after: int | None = None) -> TrainResult:
    """Train like ``Trainer(settings, ...).fit(stop_after=...)`` over ``nproc`` processes; the result is read back
    from the run folder that rank 0 wrote."""
    recipe = as_recipe(settings)
    check_supported(recipe.config, nproc)
    out_dir = Path(out_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="mavias-ddp-") as tmp:
        job = Path(tmp) / JOB_NAME
        torch.save({"data": data, "recipe": recipe, "out_dir": str(out_dir),
                    "val_groups": val_groups, "keep_epochs": keep_epochs, "stop_after": stop_after}, job)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   "-m", "mavias.core.train.distributed", str(job)]
        done = subprocess.run(command, env=os.environ | {"PYTHONPATH": _python_path()}, check=False,
                              preexec_fn=die_with_parent)  # noqa: PLW1509 - only sets a signal, no locks
        errors = sorted(Path(tmp).glob(ERROR_NAME.format(rank="*")))
        if errors:
            error = json.loads(errors[0].read_text())
            raise (TrainingDiverged if error["kind"] == TrainingDiverged.__name__ else UserError)(error["message"])
        if done.returncode != 0:
            raise RuntimeError(f"distributed training over {nproc} processes failed (exit {done.returncode}); "
                               "the ranks' output is above")
    return read_result(out_dir)


def read_result(out_dir: Path) -> TrainResult:
    summary = json.loads((out_dir / "train_summary.json").read_text())
    return TrainResult(out_dir, read_csv(out_dir / "metrics.csv"), summary["best"], summary["completed"],
                       summary["warnings"])


def die_with_parent() -> None:
    """A launcher or rank whose parent is killed (a lost Airflow worker: SIGKILL) is killed too, instead of training
    on beside the task's retry and writing the same run folder."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _python_path() -> str:
    """So that the ranks import this ``mavias``, installed or from a checkout."""
    return os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH")) if p)


def _rank_trainer(job: dict) -> DistributedTrainer:
    data: PreparedData = job["data"]
    return DistributedTrainer(job["recipe"], data["train"], data["val"], data.classes, job["out_dir"],
                              val_groups=job["val_groups"], progress=False, keep_epochs=job["keep_epochs"])


def main(job_path: str) -> None:
    die_with_parent()  # the ranks lead sessions of their own: a killed launcher would not take them down
    job = torch.load(job_path, weights_only=False)  # our own file, written by fit_distributed
    device = choose_device(job["recipe"].config.device)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        _rank_trainer(job).fit(stop_after=job["stop_after"])
    except UserError as err:
        error = Path(job_path).with_name(ERROR_NAME.format(rank=dist.get_rank()))
        error.write_text(json.dumps({"kind": type(err).__name__, "message": str(err)}))
        raise SystemExit(1) from None
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
