import math

import pytest
import torch

from mavias.core.train.losses import group_dro_step, mavias_loss


def test_mavias_loss_per_sample_matches_hand_computation():
    z_main = torch.tensor([[3.0, 4.0], [0.0, 1.0]])  # norms 5, 1
    z_tag = torch.tensor([[6.0, 8.0], [0.0, 2.0]])  # norms 10, 2
    y = torch.tensor([1, 0])
    out = mavias_loss(z_main, z_tag, y, alpha=0.1, lam=0.5)
    # alignment: 1/2 (5 - 0.5*10)^2 = 0 ; 1/2 (1 - 0.5*2)^2 = 0 -> mean 0
    assert out.alignment.item() == pytest.approx(0.0)
    # CE on z = [[9, 12], [0, 3]]: sample 0 label 1, sample 1 label 0
    ce0 = -12 + math.log(math.exp(9) + math.exp(12))
    ce1 = -0 + math.log(1 + math.exp(3))
    assert out.classification.item() == pytest.approx((ce0 + ce1) / 2, rel=1e-6)
    assert out.total.item() == pytest.approx((ce0 + ce1) / 2, rel=1e-6)


def test_alignment_term_value_and_gradient():
    z_main = torch.tensor([[3.0, 4.0]], requires_grad=True)  # norm 5
    z_tag = torch.tensor([[0.0, 2.0]], requires_grad=True)  # norm 2
    out = mavias_loss(z_main, z_tag, torch.tensor([0]), alpha=1.0, lam=0.5)
    assert out.alignment.item() == pytest.approx(0.5 * (5 - 1) ** 2)
    out.alignment.backward()
    # d/dz_main 1/2 (|z_main| - lam |z_tag|)^2 = (|z_main| - lam |z_tag|) * z_main / |z_main| = 4 * [0.6, 0.8]
    assert torch.allclose(z_main.grad, torch.tensor([[2.4, 3.2]]))
    # d/dz_tag = -(gap) * lam * z_tag / |z_tag| = -4 * 0.5 * [0, 1]
    assert torch.allclose(z_tag.grad, torch.tensor([[0.0, -2.0]]))


def test_batch_alignment_detaches_tag_logits_and_uses_frobenius_norms():
    z_main = torch.tensor([[3.0, 0.0], [0.0, 4.0]], requires_grad=True)  # Frobenius 5
    z_tag = torch.tensor([[2.0, 0.0], [0.0, 0.0]], requires_grad=True)  # Frobenius 2
    out = mavias_loss(z_main, z_tag, torch.tensor([0, 1]), alpha=1.0, lam=1.0, align="batch")
    assert out.alignment.item() == pytest.approx(9)  # (5 - 2)^2: mean-squared error, no 1/2 (public code)
    out.alignment.backward()
    assert z_tag.grad is None or torch.count_nonzero(z_tag.grad) == 0


def test_unknown_alignment_mode_is_rejected():
    with pytest.raises(ValueError, match="alignment mode"):
        mavias_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([0]), alpha=1, lam=1, align="bogus")


def test_group_dro_upweights_the_group_with_the_highest_loss():
    per_sample = torch.tensor([1.0, 3.0, 2.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1])
    weights = torch.tensor([0.5, 0.5, 0.0]).clamp(min=1e-12)
    weights = weights / weights.sum()
    loss, new = group_dro_step(per_sample, groups, weights, eta=1.0)
    # group means: g0 = 2, g1 = 2, g2 absent -> weights stay equal for 0 and 1
    assert new[0] == pytest.approx(new[1].item())
    per_sample = torch.tensor([1.0, 1.0, 3.0, 3.0])
    loss, new = group_dro_step(per_sample, groups, torch.tensor([0.5, 0.5]), eta=1.0)
    expected = torch.tensor([math.exp(1), math.exp(3)])
    expected = expected / expected.sum()
    assert torch.allclose(new, expected)
    assert loss.item() == pytest.approx((expected * torch.tensor([1.0, 3.0])).sum().item())
