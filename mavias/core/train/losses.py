"""MAVias loss (paper eq. for L_align), the group-DRO objective and the LfF / SD / FLAC / DebiAN losses, as pure
functions."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
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
    Frobenius norms over the batch, without the 1/2, z_tag detached. Under data parallelism the norms are the global
    batch's (:func:`global_frobenius_norm`), so N processes train as one would, not with alpha / N. The one remaining
    difference: g is trained by a parameter group of the main optimizer (lr x ``projection_lr_mult``), not by its own
    optimizer object -- the same update for SGD/Adam, whose state is per parameter.

    With the per-sample form's gradient into g, g can meet the norm target with a class-independent offset
    (softmax-invariant, so CE never stops it) and carry no bias at all (BENCHMARKS.md, "Why MAVias trailed JTT"):
    the default experts bias path passes z_tag here detached.
    """
    z_main = z_main.float()
    z_tag = z_tag.float()
    classification = F.cross_entropy(z_main + z_tag, y)
    if align == "per_sample":
        gap = z_main.norm(dim=1) - lam * z_tag.norm(dim=1)
        alignment = 0.5 * (gap**2).mean()
    elif align == "batch":
        alignment = (global_frobenius_norm(z_main) - lam * global_frobenius_norm(z_tag.detach())) ** 2
    else:
        raise ValueError(f"unknown alignment mode {align!r}")
    return MaviasLoss(classification + alpha * alignment, classification, alignment)


def global_frobenius_norm(z: torch.Tensor) -> torch.Tensor:
    """||Z||_F of the global batch: this process's share's, summed over the processes of a data-parallel run.

    The sum is autograd's own all-reduce, whose backward sums every process's gradient: each process then holds N
    times its share's gradient, and DDP's average over the N processes gives a single process's gradient."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return z.norm()
    return dist_nn.all_reduce(z.pow(2).sum()).clamp_min(torch.finfo(z.dtype).tiny).sqrt()  # no NaN gradient at 0


def frozen_head_logits(features: torch.Tensor, head: torch.nn.Linear) -> torch.Tensor:
    """``head(features)`` with no gradient into the head: the experts bias path learns g only."""
    return F.linear(features, head.weight.detach(), head.bias.detach())


def fit_bias_path(projection: torch.nn.Module, head: torch.nn.Linear, embeddings: torch.Tensor, labels: torch.Tensor,
                  *, rows: torch.Tensor | None = None, steps: int = 300, batch_size: int = 4096, lr: float = 0.01,
                  seed: int = 0) -> None:
    """Fits g alone (Adam, head frozen) to predict the label from the bias embedding, on the samples ``rows``
    (indices; default all), drawn in place so that no subset of the embeddings is copied."""
    device = head.weight.device
    optimizer = torch.optim.Adam(projection.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    pool = torch.arange(len(labels)) if rows is None else rows
    for _ in range(steps):
        idx = pool[torch.randint(len(pool), (min(batch_size, len(pool)),), generator=generator)]
        logits = frozen_head_logits(projection(embeddings[idx].to(device).float()), head)
        loss = F.cross_entropy(logits, labels[idx].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # no leftover gradient for the training loop's first step


def fold_of_each_sample(labels: torch.Tensor, folds: int, seed: int) -> torch.Tensor:
    """Each sample's fold of ``folds``, drawn per class so that every fold holds every class in proportion."""
    generator = torch.Generator().manual_seed(seed)
    fold = torch.zeros(len(labels), dtype=torch.long)
    for label in labels.unique():
        members = (labels == label).nonzero().squeeze(1)
        fold[members[torch.randperm(len(members), generator=generator)]] = torch.arange(len(members)) % folds
    return fold


def learned_by(fold: torch.Tensor, copies: int) -> torch.Tensor:
    """(copies, samples): True where a copy of the bias expert learns from the sample: every sample but its own
    fold's, or every sample for a single copy."""
    if copies == 1:
        return torch.ones(1, len(fold), dtype=torch.bool, device=fold.device)
    return fold[None, :] != torch.arange(copies, device=fold.device)[:, None]


def cross_fitted_expert(logits: torch.Tensor, fold: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """From the bias expert's copies' logits (copies, batch, classes) on samples of ``fold``: each sample's logits
    from the copy that does not learn from its fold (the only copy, for one), and the sum over copies of each copy's
    mean cross-entropy on the samples it learns from, so every copy learns at the rate a single expert would."""
    held_out = logits[fold, torch.arange(len(fold), device=logits.device)]
    losses = [F.cross_entropy(copy[learns].float(), y[learns])
              for copy, learns in zip(logits, learned_by(fold, logits.shape[0]), strict=True) if learns.any()]
    return held_out, torch.stack(losses).sum()


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


def generalized_ce(logits: torch.Tensor, y: torch.Tensor, q: float) -> torch.Tensor:
    """Per-sample generalised cross-entropy of the LfF biased model as the LfF authors' code computes it: CE weighted
    by the detached q * p_y^q. Its gradient, q * p_y^q * grad CE, is q times that of (1 - p_y^q) / q (Zhang and
    Sabuncu 2018); the loss value is a weighted CE, not the GCE itself."""
    logits = logits.float()
    p_y = F.softmax(logits, dim=1).gather(1, y[:, None]).squeeze(1)
    return F.cross_entropy(logits, y, reduction="none") * (q * p_y.detach() ** q)


def ema_update(buffer: torch.Tensor, seen: torch.Tensor, idx: torch.Tensor, values: torch.Tensor, decay: float) -> None:
    """In place: buffer[idx] <- decay * buffer[idx] + (1 - decay) * values; a sample's first value is taken as is."""
    buffer[idx] = torch.where(seen[idx], decay * buffer[idx] + (1 - decay) * values, values)


def relative_difficulty(loss_b: torch.Tensor, loss_d: torch.Tensor) -> torch.Tensor:
    """LfF weight W(x) = L_B / (L_B + L_D) (Nam et al. 2020, eq. 2): near 1 where the biased model fails."""
    return loss_b / (loss_b + loss_d + 1e-8)


def spectral_decoupling(logits: torch.Tensor, y: torch.Tensor, coefficient: float) -> torch.Tensor:
    """CE + coefficient * z_y^2, the true class's logit squared, averaged over the batch: the penalty of the
    reference implementation (VB-Mitigator's SD; Pezeshki et al. 2021 penalise each class's logit around a target)."""
    logits = logits.float()
    return F.cross_entropy(logits, y) + coefficient * (logits.gather(1, y[:, None]) ** 2).mean()


def _pairwise_similarity(features: torch.Tensor, d: float) -> torch.Tensor:
    """FLAC's kernel 1 / (1 + ||f_i - f_j||^d); the distance is sqrt(squared distance + 1e-6), so its gradient stays
    finite on the diagonal."""
    features = features.float()
    squared = features.pow(2).sum(1)
    distances = (squared[:, None] + squared[None, :] - 2 * features @ features.T).clamp(min=0)
    return 1 / (1 + (distances + 1e-6).sqrt() ** d)


def flac_divergence(bias_features: torch.Tensor, features: torch.Tensor, y: torch.Tensor, d: float) -> torch.Tensor:
    """FLAC (Sarridis et al. 2023): Jeffreys divergence between the main model's feature similarities and the
    bias-capturing model's dissimilarities, over the pairs the bias model gets wrong: same class but dissimilar bias
    features, or other class but similar bias features (threshold: the midpoint of the batch's bias similarities).
    Both feature sets are L2-normalised first, as in the FLAC authors' code, so the kernel does not depend on the
    feature scale. Each row is normalised over its selected pairs; the mean over selected pairs is returned, 0 when
    there are none."""
    bias_similarity = _pairwise_similarity(F.normalize(bias_features.detach().float(), dim=1), d)
    similarity = _pairwise_similarity(F.normalize(features.float(), dim=1), d)
    threshold = (bias_similarity.max() + bias_similarity.min()) / 2
    same_class = y[:, None] == y[None, :]
    pairs = (same_class & (bias_similarity < threshold)) | (~same_class & (bias_similarity > threshold))
    if not pairs.any():
        return features.sum() * 0.0  # keeps the graph, so a batch without pairs backpropagates zeros
    target = (1 - bias_similarity) / ((1 - bias_similarity) * pairs).sum(1, keepdim=True).clamp(min=1e-7)
    matched = similarity / (similarity * pairs).sum(1, keepdim=True).clamp(min=1e-7)
    p, q = target[pairs], matched[pairs]
    return ((p - q) * (p.log() - q.log())).mean()


DEBIAN_EPS = 1e-6  # the DebiAN authors' constant inside the logs and the soft-group denominators


def _soft_group_accuracies(p_correct: torch.Tensor, p_group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean correct-class probability inside the discovered group and outside it, weighted by membership."""
    inside = (p_group * p_correct).sum() / (p_group.sum() + DEBIAN_EPS)
    outside = ((1 - p_group) * p_correct).sum() / ((1 - p_group).sum() + DEBIAN_EPS)
    return inside, outside


@dataclass(frozen=True)
class DebiANLoss:
    discoverer: torch.Tensor  # the discoverer's objective, differentiable in p_group
    weights: torch.Tensor  # the classifier's per-sample CE weights, constants


def debian_losses(p_correct: torch.Tensor, p_group: torch.Tensor, y: torch.Tensor) -> DebiANLoss:
    """DebiAN (Li et al. 2022), one pass over the classes in the batch. ``p_correct``: the classifier's probability of
    the true class; ``p_group``: the discoverer's sigmoid output at the true class.

    Discoverer, averaged over the classes: -log |inside - outside| (maximise the classifier's equal-opportunity
    violation between the two discovered groups) - log(1 - |mean p - mean (1 - p)|) (the penalty against putting a
    whole class in one group). Classifier weight: 1 + the probability of belonging to the discovered group of its
    class in which the classifier is less accurate (the group itself on a tie, as in the authors' code)."""
    per_class = []
    weights = torch.ones_like(p_group)
    for label in y.unique():
        mask = y == label
        p, g = p_correct[mask], p_group[mask]
        inside, outside = _soft_group_accuracies(p, g)
        violation = -torch.log(DEBIAN_EPS + (inside - outside).abs())
        imbalance = -torch.log(DEBIAN_EPS + 1 - (g.mean() - (1 - g).mean()).abs())
        per_class.append(violation + imbalance)
        weights[mask] = 1 + torch.where(outside < inside, 1 - g, g).detach()
    return DebiANLoss(torch.stack(per_class).mean(), weights)
