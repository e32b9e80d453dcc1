"""Running the main model (never the projection) over a split."""

from __future__ import annotations

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from mavias.core.train.data import SplitData


def to_model_input(x: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """uint8 images -> float in [0, 1]; features pass through."""
    x = x.to(device, non_blocking=True)
    return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def predict_logits(model: nn.Module, split: SplitData, *, batch_size: int = 256, num_workers: int = 0) -> torch.Tensor:
    """Main-model logits z_main for every sample of the split, in order (float32, on CPU)."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    loader = DataLoader(split.inputs, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    out = [model(to_model_input(x, device)).float().cpu() for x in loader]
    model.train(was_training)
    return torch.cat(out) if out else torch.empty(0, 0)


def predictions_frame(split: SplitData, logits: torch.Tensor) -> pd.DataFrame:
    """The predictions artifact: sample_id, label, pred, correct, logit_<k>, plus the split's tags/attributes."""
    pred = logits.argmax(1)
    frame = split.frame.drop(columns=[c for c in ("uri",) if c in split.frame.columns]).copy()
    frame["label_name"] = frame["label"]
    frame["label"] = split.labels.numpy()
    frame["pred"] = pred.numpy()
    frame["correct"] = (pred == split.labels).numpy()
    for k in range(logits.shape[1]):
        frame[f"logit_{k}"] = logits[:, k].numpy()
    return frame


def predict(model: nn.Module, split: SplitData, *, batch_size: int = 256) -> pd.DataFrame:
    return predictions_frame(split, predict_logits(model, split, batch_size=batch_size))
