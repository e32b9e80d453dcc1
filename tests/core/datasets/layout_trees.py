"""Fixture trees in the published layouts of CelebA, UrbanCars and ImageNet-9 (a few tiny images per folder)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mavias.core.datasets.generate import write_image

CELEBA_NAMES = ["5_o_Clock_Shadow", "Arched_Eyebrows", "Blond_Hair", "Male", "Young"]


def celeba_cells(n_per_cell: int = 2) -> list[tuple[int, int, int]]:
    """(blond, male, partition) per image, every cell of every partition present."""
    return [(b, m, p) for p in (0, 1, 2) for b in (1, -1) for m in (1, -1) for _ in range(n_per_cell)]


def write_celeba(root: Path, cells: list[tuple[int, int, int]], *, csv: bool = False,
                 names: list[str] = CELEBA_NAMES) -> list[str]:
    rng = np.random.default_rng(0)
    files = [f"{i + 1:06d}.jpg" for i in range(len(cells))]
    for f in files:
        write_image(root / "img_align_celeba" / f, rng)
    values = [{"Blond_Hair": b, "Male": m} for b, m, _ in cells]
    rows = [[str(v.get(n, -1)) for n in names] for v in values]
    if csv:
        (root / "list_attr_celeba.csv").write_text(
            "\n".join([",".join(["image_id", *names])] + [",".join([f, *r]) for f, r in zip(files, rows)]) + "\n")
        (root / "list_eval_partition.csv").write_text(
            "\n".join(["image_id,partition"] + [f"{f},{p}" for f, (_, _, p) in zip(files, cells)]) + "\n")
    else:
        (root / "list_attr_celeba.txt").write_text(
            "\n".join([str(len(files)), " ".join(names)] + [f"{f} " + " ".join(f"{int(x):2d}" for x in r)
                                                           for f, r in zip(files, rows)]) + "\n")
        (root / "list_eval_partition.txt").write_text("\n".join(f"{f} {p}" for f, (_, _, p) in zip(files, cells)) + "\n")
    return files


def write_urbancars(root: Path, per_folder: int = 2) -> Path:
    rng = np.random.default_rng(1)
    kinds = ("urban", "country")
    for ratio, splits in (("bg-0.95_co_occur_obj-0.95", ("train",)), ("bg-0.5_co_occur_obj-0.5", ("val", "test"))):
        for split in splits:
            for o in kinds:
                for b in kinds:
                    for c in kinds:
                        for i in range(per_folder):
                            write_image(root / ratio / split / f"obj-{o}_bg-{b}_co_occur_obj-{c}" / f"{i:03d}.jpg", rng)
    return root


IN9_CLASSES = ("00_dog", "01_bird")


def write_imagenet9(root: Path, variants: tuple[str, ...], per_class: int = 2) -> Path:
    rng = np.random.default_rng(2)
    for variant in variants:
        for cls in IN9_CLASSES:
            for i in range(per_class):
                write_image(root / "bg_challenge" / variant / "val" / cls / f"{cls}_{i}.JPEG", rng)
    return root
