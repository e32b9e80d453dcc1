"""``mavias export``: a run's main model (backbone + head) as verified ONNX, with its model card next to it.

The same export and verification as the nightly package step (ONNX Runtime vs PyTorch, max |logit diff| <= 1e-4 and
identical argmax). A run made with ``mavias train`` has no held-out set on record, so verification uses seeded random
images: parity is a property of the graph, not of the data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from mavias.errors import UserError
from mavias.pipeline.export import ExportError, export_onnx, verify_onnx
from mavias.pipeline.gates import GateConfig, GateReport
from mavias.registry.model_card import build_model_card, lineage_from_files, write_model_card
from mavias.train.trainer import load_main_model, run_checkpoint

VERIFY_IMAGES, VERIFY_SEED = 64, 0
CARD_NAME = "model_card.json"


def export_checkpoint(checkpoint: Path, out: Path, *, name: str, version: str) -> dict[str, Any]:
    """Export, verify and write ``model_card.json`` beside ``out``; return the card."""
    try:
        model, classes, cfg = load_main_model(checkpoint)
        onnx_path = export_onnx(model, out, image_size=cfg.image_size)
        images = torch.randint(0, 256, (VERIFY_IMAGES, 3, cfg.image_size, cfg.image_size), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(VERIFY_SEED))
        verification = verify_onnx(onnx_path, model, images)
    except (ExportError, KeyError, RuntimeError) as err:
        raise UserError(f"cannot export {checkpoint}: {err}") from err
    card = build_model_card(
        name=name, version=version, classes=classes, onnx_path=onnx_path, verification=verification, evaluation={},
        gates=GateReport(GateConfig(version=1), []), train_config=cfg,
        lineage=lineage_from_files([], {"checkpoint": checkpoint}),
    )
    card["gates"] = {"passed": None, "note": "exported from a run folder: no gates were run"}
    write_model_card(out.with_name(CARD_NAME), card)
    return card


def export_command(
    out: Annotated[Path, typer.Option("--out", help="ONNX file to write; model_card.json is written beside it")],
    run: Annotated[Path | None, typer.Option("--run", help="run folder of `mavias train`")] = None,
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint",
                                                    help="a best_*.pt or last.pt instead of --run")] = None,
    criterion: Annotated[str | None, typer.Option(help="which best checkpoint of --run: val_acc, val_tag_wg or val_robust; "
                                                       "default: the run's selection")] = None,
    name: Annotated[str, typer.Option(help="model name in the card")] = "mavias-model",
    version: Annotated[str | None, typer.Option(help="version in the card; default: the checkpoint's folder")] = None,
) -> None:
    """Export the main model (backbone + head, never the bias projection) as ONNX, verified against PyTorch."""
    if (run is None) == (checkpoint is None):
        raise UserError("pass exactly one of --run DIR or --checkpoint PATH")
    if checkpoint is None:
        checkpoint = run_checkpoint(run, criterion)
    elif not checkpoint.is_file():
        raise UserError(f"{checkpoint} does not exist; pass a best_*.pt or last.pt written by `mavias train`")
    if out.suffix != ".onnx":
        raise UserError(f"--out {out}: the file name must end in .onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    card = export_checkpoint(checkpoint, out, name=name, version=version or checkpoint.resolve().parent.name)
    check = card["verification"]
    typer.echo(f"wrote {out} ({len(card['classes'])} classes, sha256 {card['onnx']['sha256'][:12]}) and "
               f"{out.with_name(CARD_NAME)}; ONNX Runtime vs PyTorch on {check['n']} images: "
               f"max |logit diff| {check['max_abs_diff']:.1e}, argmax equal")
    typer.echo(f"serve it: mavias serve --model-dir {out.parent}")
