"""The torch device a setting names: ``auto`` (a GPU when one is present), ``cpu``, ``cuda`` or ``cuda:N``, and what
it computes natively."""

from __future__ import annotations

import re

import torch

from mavias.errors import UserError

DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")


def choose_device(name: str = "auto") -> torch.device:
    if not DEVICE_NAME.fullmatch(name):
        raise UserError(f"unknown device {name!r}", hint="use auto (a GPU when present), cpu, cuda or cuda:N")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} was asked for but no CUDA device is available", hint="use auto or cpu")
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        raise UserError(f"device {name!r} was asked for but this machine has {torch.cuda.device_count()} CUDA "
                        "device(s), numbered from 0", hint="use auto, cuda or a number that exists")
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
