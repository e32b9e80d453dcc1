"""The torch device a setting names: ``auto`` (a GPU when one is present), ``cpu``, ``cuda`` or ``cuda:N``, and what
it computes natively."""

from __future__ import annotations

import torch

from mavias.errors import UserError


def choose_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} was asked for but no CUDA device is available", hint="use auto or cpu")
    return torch.device(name)


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively (a CUDA GPU that supports it; a CPU with AVX512-BF16 or AMX),
    so that bfloat16 autocast speeds training up rather than emulating the format."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    cpu = torch.cpu  # the CPU's capability queries are private in torch; absent ones mean no
    return any(getattr(cpu, name, lambda: False)() for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
