"""MAVias loss (paper eq. for L_align) and the group-DRO objective, as pure functions of tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class MaviasLoss:
    total: torch.Tensor
    classification: torch.Tensor
    alignment: torch.Tensor


def mavias_loss(
    z_main: torch.Tensor, z_tag: torch.Tensor, y: torch.Tensor, *, alpha: float, lam: float, align: str = "per_sample"
) -> MaviasLoss:
    """CE(z_main + z_tag, y) + alpha * L_align, averaged over the batch.

    per_sample (paper): L_align_i = 1/2 (||z_main_i|| - lam ||z_tag_i||)^2.
    batch (as the public reference code): the mean-squared error (||Z_main||_F - lam ||Z_tag||_F)^2 of the two
    Frobenius norms over the batch, without the 1/2, z_tag detached. The one remaining difference: g is trained by a
    parameter group of the main optimizer (lr x ``projection_lr_mult``), not by its own optimizer object -- the same
    update for SGD/Adam, whose state is per parameter.
    """
    z_main = z_main.float()
    z_tag = z_tag.float()
    classification = F.cross_entropy(z_main + z_tag, y)
    if align == "per_sample":
        gap = z_main.norm(dim=1) - lam * z_tag.norm(dim=1)
        alignment = 0.5 * (gap**2).mean()
    elif align == "batch":
        alignment = (z_main.norm() - lam * z_tag.detach().norm()) ** 2
    else:
        raise ValueError(f"unknown alignment mode {align!r}")
    return MaviasLoss(classification + alpha * alignment, classification, alignment)


def group_losses(per_sample: torch.Tensor, groups: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean loss per group and the count per group (0 where the batch has none)."""
    counts = torch.bincount(groups, minlength=num_groups).to(per_sample.dtype)
    sums = torch.zeros(num_groups, dtype=per_sample.dtype, device=per_sample.device).index_add(0, groups, per_sample)
    return sums / counts.clamp(min=1), counts


def group_dro_step(
    per_sample: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor, eta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Online GroupDRO (Sagawa et al. 2020): q_g <- q_g exp(eta * loss_g), renormalised; loss = sum_g q_g loss_g."""
    losses, counts = group_losses(per_sample, groups, len(weights))
    present = counts > 0
    new_weights = weights * torch.exp(eta * losses.detach() * present)
    new_weights = new_weights / new_weights.sum()
    return (new_weights * losses).sum(), new_weights
