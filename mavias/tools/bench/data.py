"""`mavias bench data`: importer speed on generated trees and CPU/GPU training throughput of ResNet-18, ERM vs MAVias.

Import speed: images/s of ``import_imagefolder`` and ``import_waterbirds`` (read, hash, decode check, thread pool)
on ``n_files`` generated 64 px JPEGs. Training throughput: images/s of the trainer's epoch loop (forward, backward,
step; images already decoded in memory, so the model's cost alone) over ``batches`` batches, timed in the second
of two epochs (the first is the warm-up).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from mavias.core.datasets import SplitOptions, import_imagefolder, import_waterbirds
from mavias.core.datasets.generate import write_imagefolder, write_waterbirds
from mavias.core.train.config import TrainConfig
from mavias.core.train.data import SplitData, class_index
from mavias.core.train.recipe import resolve_recipe
from mavias.core.train.trainer import Trainer
from mavias.utils.atomic import write_report

EMBEDDING_DIM = 768  # OpenCLIP ViT-L-14's text embedding
CLASSES = ["a", "b"]


class _InMemoryImages(Dataset):
    def __init__(self, images: torch.Tensor):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.images[i]


def _random_split(n: int, size: int, seed: int) -> SplitData:
    gen = torch.Generator().manual_seed(seed)
    labels = pd.Series(np.array(CLASSES)[torch.randint(0, 2, (n,), generator=gen).numpy()])
    frame = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "label": labels})
    split = SplitData(_InMemoryImages(torch.randint(0, 256, (n, 3, size, size), generator=gen, dtype=torch.uint8)),
                      frame, class_index(CLASSES, labels))
    split.embeddings = torch.nn.functional.normalize(torch.randn(n, EMBEDDING_DIM, generator=gen), dim=1)
    return split


def import_speed(work: Path, n_files: int) -> dict[str, float]:
    folder, birds = work / f"imagefolder-{n_files}", work / f"waterbirds-{n_files}"
    if not folder.exists():
        write_imagefolder(folder, {f"class{i}": n_files // 10 for i in range(10)}, size=64)
    if not birds.exists():
        write_waterbirds(birds, n_files, size=64)
    speeds = {}
    for name, run in (("imagefolder", lambda: import_imagefolder(folder, SplitOptions(), progress=False)),
                      ("waterbirds", lambda: import_waterbirds(birds, progress=False))):
        start = time.perf_counter()
        result = run()
        speeds[f"{name}_images_per_s"] = len(result.manifest) / (time.perf_counter() - start)
    return speeds


def training_throughput(work: Path, *, batches: int, batch_size: int, image_size: int, device: str) -> dict[str, float]:
    train = _random_split(batches * batch_size, image_size, seed=0)
    val = _random_split(batch_size, image_size, seed=1)
    speeds = {}
    for method in ("erm", "mavias"):
        cfg = TrainConfig.model_validate({"method": method, "backbone": {"name": "resnet18"}, "epochs": 2,
                                          "optim": {"lr": 0.01},  # a set rate: no range test inside the timing
                                          "batch_size": batch_size, "image_size": image_size, "selection": "val_acc",
                                          "device": device})
        recipe = resolve_recipe(cfg, train, len(CLASSES))  # the rate is set: no range test inside the timing
        history = Trainer(recipe, train, val, CLASSES, work / f"train-{method}", progress=False).fit(resume=False).history
        speeds[f"{method}_images_per_s"] = len(train) / float(history["seconds"].iloc[-1])  # epoch 1 is the warm-up
    speeds["mavias_over_erm"] = speeds["mavias_images_per_s"] / speeds["erm_images_per_s"]
    return speeds


def run_data_bench(work: Path, *, n_files: int = 10_000, batches: int = 16, batch_size: int = 32, image_size: int = 224,
                   device: str = "auto", json_path: Path | None = None) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    report = {
        "import": import_speed(work, n_files) | {"n_files": n_files},
        "training": training_throughput(work, batches=batches, batch_size=batch_size, image_size=image_size,
                                        device=device) | {"batches": batches, "batch_size": batch_size,
                                                          "image_size": image_size, "backbone": "resnet18",
                                                          "device": "cuda" if torch.cuda.is_available() and device != "cpu" else "cpu"},
    }
    if json_path is not None:
        write_report(json_path, report)
    return report
