"""LfF and SD losses against their papers' formulas, computed by hand on tiny tensors."""

import math

import pytest
import torch

from mavias.train.losses import ema_update, generalized_ce, relative_difficulty, spectral_decoupling


def test_generalized_ce_matches_one_minus_p_to_the_q_over_q():
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(4.0), 0.0]])  # p = [1/4, 3/4], [4/5, 1/5]
    y = torch.tensor([1, 1])
    expected = [(1 - 0.75**0.7) / 0.7, (1 - 0.2**0.7) / 0.7]
    assert generalized_ce(logits, y, 0.7).tolist() == pytest.approx(expected, rel=1e-6)
    # q -> 0 recovers cross-entropy; q = 1 is the MAE-like 1 - p_y
    assert generalized_ce(logits, y, 1.0).tolist() == pytest.approx([0.25, 0.8], rel=1e-6)
    assert generalized_ce(logits, y, 1e-4).tolist() == pytest.approx([-math.log(0.75), -math.log(0.2)], rel=1e-3)


def test_generalized_ce_gradient_is_ce_gradient_times_p_to_the_q():
    logits = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)
    generalized_ce(logits, torch.tensor([1]), 0.7).sum().backward()
    # d/dz (1 - p^q)/q = p^q * d/dz(-log p) = p^q * (softmax - onehot)
    p = torch.tensor([[0.25, 0.75]])
    assert torch.allclose(logits.grad, 0.75**0.7 * (p - torch.tensor([[0.0, 1.0]])), atol=1e-6)


def test_ema_takes_the_first_value_then_decays():
    buffer, seen = torch.zeros(3), torch.zeros(3, dtype=torch.bool)
    idx = torch.tensor([0, 2])
    ema_update(buffer, seen, idx, torch.tensor([1.0, 2.0]), 0.7)
    assert buffer.tolist() == [1.0, 0.0, 2.0]
    seen[idx] = True
    ema_update(buffer, seen, idx, torch.tensor([3.0, 0.0]), 0.7)
    assert buffer.tolist() == pytest.approx([0.7 * 1 + 0.3 * 3, 0.0, 0.7 * 2])


def test_relative_difficulty_weights_the_biased_models_failures():
    w = relative_difficulty(torch.tensor([3.0, 1.0, 0.0]), torch.tensor([1.0, 3.0, 2.0]))
    assert w.tolist() == pytest.approx([0.75, 0.25, 0.0])


def test_spectral_decoupling_is_ce_plus_half_lambda_squared_logit_norm():
    logits = torch.tensor([[1.0, 2.0], [0.0, 0.0]], requires_grad=True)
    y = torch.tensor([1, 0])
    ce = ((-2 + math.log(math.exp(1) + math.exp(2))) + math.log(2)) / 2
    penalty = 0.5 * 0.1 * ((1 + 4) + 0) / 2
    loss = spectral_decoupling(logits, y, 0.1)
    assert loss.item() == pytest.approx(ce + penalty, rel=1e-6)
    loss.backward()
    softmax = torch.softmax(logits.detach(), 1)
    expected = (softmax - torch.tensor([[0.0, 1.0], [1.0, 0.0]])) / 2 + 0.1 * logits.detach() / 2
    assert torch.allclose(logits.grad, expected, atol=1e-6)
