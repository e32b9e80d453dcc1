"""The torch device a setting names: ``auto`` (a GPU when one is present), ``cpu``, ``cuda`` or ``cuda:N``."""

from __future__ import annotations

import torch

from mavias.errors import UserError


def choose_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} was asked for but no CUDA device is available", hint="use auto or cpu")
    return torch.device(name)
