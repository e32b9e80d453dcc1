"""LfF, SD, FLAC and DebiAN losses against their papers' formulas, computed by hand on tiny tensors."""

import math

import pytest
import torch

from mavias.core.train.losses import (
    debian_losses,
    ema_update,
    flac_divergence,
    generalized_ce,
    relative_difficulty,
    spectral_decoupling,
)


def test_generalized_ce_is_the_lff_authors_weighted_ce():
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(4.0), 0.0]])  # p = [1/4, 3/4], [4/5, 1/5]
    y = torch.tensor([1, 1])
    expected = [-math.log(0.75) * 0.7 * 0.75**0.7, -math.log(0.2) * 0.7 * 0.2**0.7]
    assert generalized_ce(logits, y, 0.7).tolist() == pytest.approx(expected, rel=1e-6)


def test_generalized_ce_gradient_is_q_times_the_gce_gradient():
    logits = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)
    generalized_ce(logits, torch.tensor([1]), 0.7).sum().backward()
    # the GCE (1 - p^q)/q has gradient p^q * (softmax - onehot); the authors' code scales it by q
    p = torch.tensor([[0.25, 0.75]])
    assert torch.allclose(logits.grad, 0.7 * 0.75**0.7 * (p - torch.tensor([[0.0, 1.0]])), atol=1e-6)


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


def test_spectral_decoupling_is_ce_plus_lambda_times_the_true_class_logit_squared():
    logits = torch.tensor([[1.0, 2.0], [3.0, 0.5]], requires_grad=True)
    y = torch.tensor([1, 0])
    ce = ((-2 + math.log(math.exp(1) + math.exp(2))) + (-3 + math.log(math.exp(3) + math.exp(0.5)))) / 2
    penalty = 0.1 * (2.0**2 + 3.0**2) / 2  # z_y^2 of each sample, averaged over the batch
    loss = spectral_decoupling(logits, y, 0.1)
    assert loss.item() == pytest.approx(ce + penalty, rel=1e-6)
    loss.backward()
    one_hot = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    expected = (torch.softmax(logits.detach(), 1) - one_hot) / 2 + 0.1 * 2 * logits.detach() * one_hot / 2
    assert torch.allclose(logits.grad, expected, atol=1e-6)


def _kernel(distance: float) -> float:  # FLAC's similarity 1 / (1 + dist^d) at d = 1, with the 1e-6 inside the root
    return 1 / (1 + math.sqrt(distance**2 + 1e-6))


def _unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def test_flac_divergence_matches_the_papers_formula_by_hand():
    # unit bias features at 0, 20, 10 and 180 degrees (classes 0, 0, 1, 1): chord distances 2 sin(angle / 2)
    chord = {pair: 2 * math.sin(math.radians(angle) / 2)
             for pair, angle in {(0, 1): 20, (0, 2): 10, (0, 3): 180, (1, 2): 10, (1, 3): 160, (2, 3): 170}.items()}
    s = {pair: _kernel(distance) for pair, distance in chord.items()}
    threshold = (_kernel(0) + _kernel(2)) / 2  # midpoint of the largest (diagonal) and smallest similarity
    assert s[(0, 1)] > threshold > s[(2, 3)] and s[(0, 2)] > threshold > s[(0, 3)]
    # selected pairs: same class and dissimilar bias (2-3), other class and similar bias (0-2, 1-2); rows 0, 1 and 3
    # select one pair each, so their distributions are both 1 and add 0; row 2 selects 0, 1 and 3
    main = torch.tensor([_unit(90), _unit(90), _unit(90), _unit(0)])  # main-model features, unit length
    target = [1 - s[(0, 2)], 1 - s[(1, 2)], 1 - s[(2, 3)]]
    matched = [_kernel(0), _kernel(0), _kernel(math.sqrt(2))]
    p = [t / sum(target) for t in target]
    q = [m / sum(matched) for m in matched]
    expected = sum((pi - qi) * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q)) / 6  # 6 selected pairs
    bias = torch.tensor([_unit(0), _unit(20), _unit(10), _unit(180)])
    y = torch.tensor([0, 0, 1, 1])
    assert flac_divergence(bias, main, y, d=1.0).item() == pytest.approx(expected, rel=1e-5)
    # features are L2-normalised first (FLAC authors' code): the scale of either feature set changes nothing
    assert flac_divergence(7.0 * bias, 0.01 * main, y, d=1.0).item() == pytest.approx(expected, rel=1e-5)


def test_flac_divergence_is_zero_without_selected_pairs_and_has_finite_gradients():
    features = torch.tensor([[0.0, 1.0], [0.0, 1.0], [2.0, 0.0]], requires_grad=True)
    y = torch.tensor([0, 0, 1])
    # the bias model agrees with the labels: same class similar, other class dissimilar -> nothing to correct
    agreeing = torch.tensor([[0.0], [0.0], [9.0]])
    loss = flac_divergence(agreeing, features, y, d=0.5)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(features.grad, torch.zeros_like(features))
    features.grad = None
    disagreeing = torch.tensor([[0.0], [9.0], [0.1]])  # class-0 images far apart, image 2 close to image 0
    flac_divergence(disagreeing, features, y, d=0.5).backward()
    assert torch.isfinite(features.grad).all() and features.grad.abs().sum() > 0  # identical features 0 and 1 too


# DebiAN on three images: class 0 with correct-class probabilities 0.9, 0.5 and discovered-group memberships
# 0.8, 0.2; class 1 with one image, 0.3 and 0.6 (float64: class 1's gap is of the order of eps)
DEBIAN_P_CORRECT = torch.tensor([0.9, 0.5, 0.3], dtype=torch.float64)
DEBIAN_Y = torch.tensor([0, 0, 1])


def test_debian_classifier_weights_favour_the_less_accurate_discovered_group():
    p_group = torch.tensor([0.8, 0.2, 0.6], dtype=torch.float64, requires_grad=True)
    weights = debian_losses(DEBIAN_P_CORRECT, p_group, DEBIAN_Y).weights
    # class 0: inside (0.8*0.9 + 0.2*0.5) / 1.0 = 0.82, outside (0.2*0.9 + 0.8*0.5) / 1.0 = 0.58 -> the outside group is
    # worse, weights 1 + (1 - p); class 1, one image: inside 0.18 / (0.6 + eps) > outside 0.12 / (0.4 + eps), so 1 + 0.4
    assert weights.tolist() == pytest.approx([1.2, 1.8, 1.4], rel=1e-5)
    assert not weights.requires_grad  # constants for the classifier: no gradient reaches the discoverer through them


def test_debian_discoverer_loss_matches_the_authors_formula_by_hand():
    p_group = torch.tensor([0.8, 0.2, 0.6], dtype=torch.float64, requires_grad=True)
    loss = debian_losses(DEBIAN_P_CORRECT, p_group, DEBIAN_Y).discoverer
    eps = 1e-6
    gap0 = 0.82 / (1.0 + eps) - 0.58 / (1.0 + eps)  # the soft accuracies above, with the authors' eps
    class0 = -math.log(eps + gap0) - math.log(eps + 1 - abs(0.5 - 0.5))
    gap1 = 0.18 / (0.6 + eps) - 0.12 / (0.4 + eps)  # one image: a gap of ~2.5e-7 from eps alone, the loss stays finite
    class1 = -math.log(eps + gap1) - math.log(eps + 1 - abs(0.6 - 0.4))
    assert loss.item() == pytest.approx((class0 + class1) / 2, rel=1e-9)
    loss.backward()
    # more membership for the well-classified image widens class 0's gap, so the loss falls along it
    assert p_group.grad[0] < 0 < p_group.grad[1]

