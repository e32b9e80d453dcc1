"""``mavias export``: a run's main model (backbone + head) as verified ONNX, with its model card next to it
(:func:`mavias.ops.export.version.export_checkpoint`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mavias.cli.options import run_checkpoint, writable_file
from mavias.errors import UserError
from mavias.ops.registry.model_card import CARD_NAME


def export_command(
    out: Annotated[Path, typer.Option("--out", help="ONNX file to write; model_card.json is written beside it",
                                                callback=writable_file)],
    run: Annotated[Path | None, typer.Option("--run", help="run folder of `mavias train`")] = None,
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint",
                                                    help="a best_*.pt or last.pt instead of --run")] = None,
    criterion: Annotated[str | None, typer.Option(help="which best checkpoint of --run: val_acc, val_tag_wg or val_robust; "
                                                       "default: the run's selection")] = None,
    name: Annotated[str, typer.Option(help="model name in the card")] = "mavias-model",
    version: Annotated[str | None, typer.Option(help="version in the card; default: the checkpoint's folder")] = None,
) -> None:
    """Export the main model (backbone + head, never the bias projection) as ONNX, verified against PyTorch."""
    from mavias.ops.export.version import export_checkpoint

    if (run is None) == (checkpoint is None):
        raise UserError("pass exactly one of --run DIR or --checkpoint PATH")
    if checkpoint is None:
        checkpoint = run_checkpoint(run, criterion)
    elif not checkpoint.is_file():
        problem = "is a folder (pass it with --run)" if checkpoint.is_dir() else "does not exist"
        raise UserError(f"{checkpoint} {problem}; pass a best_*.pt or last.pt written by `mavias train`")
    if out.suffix != ".onnx":
        raise UserError(f"--out {out}: the file name must end in .onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    card = export_checkpoint(checkpoint, out, name=name, version=version or checkpoint.resolve().parent.name)
    check = card["verification"]
    typer.echo(f"wrote {out} ({len(card['classes'])} classes, sha256 {card['onnx']['sha256'][:12]}) and "
               f"{out.with_name(CARD_NAME)}; ONNX Runtime vs PyTorch on {check['n']} images: "
               f"max |logit diff| {check['max_abs_diff']:.1e}, argmax equal")
    typer.echo(f"serve it: mavias serve --model-dir {out.parent}")
