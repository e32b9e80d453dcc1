"""Training methods sharing one trainer: ERM, MAVias, GroupDRO (oracle, true groups), JTT, LfF, SD, FLAC-B and
DebiAN."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mavias.core.train.config import TrainConfig
from mavias.core.train.data import SplitData
from mavias.core.train.inference import predict_logits, to_model_input
from mavias.core.train.losses import (
    cross_fitted_expert,
    debian_losses,
    ema_update,
    fit_bias_path,
    flac_divergence,
    fold_of_each_sample,
    frozen_head_logits,
    generalized_ce,
    group_dro_step,
    learned_by,
    mavias_loss,
    relative_difficulty,
    spectral_decoupling,
)
from mavias.core.train.model import MainModel, build_projection
from mavias.core.train.optim import make_optimizer
from mavias.errors import UserError

Stats = dict[str, float]
log = logging.getLogger(__name__)


class Method:
    """ERM: plain cross-entropy on the main model's logits. Subclasses change the loss or the sampling."""

    name = "erm"

    def __init__(self, cfg: TrainConfig, model: MainModel, train: SplitData):
        self.cfg = cfg
        self.model = model
        self.train = train

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model}

    def param_groups(self) -> list[dict]:
        return [{"params": list(self.model.parameters()), "lr": self.cfg.optim.lr}]

    def prepare(self, fit: Callable[[MainModel, int], None]) -> None:
        """Work before the main epochs (JTT's identification model); ``fit(model, epochs)`` trains an ERM model."""

    def sampling_weights(self) -> torch.Tensor | None:
        return None

    def loss(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        loss = F.cross_entropy(self.model(x).float(), y)
        return loss, {"loss": loss.item()}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class Mavias(Method):
    """z = z_main + head(g(e)); loss = CE(z, y) + alpha * L_align (paper eq.). Inference uses z_main only."""

    name = "mavias"

    def __init__(self, cfg: TrainConfig, model: MainModel, train: SplitData):
        super().__init__(cfg, model, train)
        if train.embeddings is None:
            raise ValueError("MAVias needs bias embeddings for the training split (run `mavias encode` first)")
        folds = cfg.mavias.bias_folds
        dims = (train.embeddings.shape[1], model.feature_dim)
        self.projection = build_projection(*dims) if folds == 1 else nn.ModuleList(
            build_projection(*dims) for _ in range(folds))
        self.fold = fold_of_each_sample(train.labels, folds, cfg.seed)
        self.bias_fitted = False

    def _bias_experts(self) -> list[nn.Module]:
        """The experts path's copies of g (one unless cross-fitted)."""
        return list(self.projection) if isinstance(self.projection, nn.ModuleList) else [self.projection]

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model, "projection": self.projection}

    def prepare(self, fit: Callable[[MainModel, int], None]) -> None:
        """experts (product of experts): g starts fitted to the labels (head frozen), so the bias logits are informed
        from the first step; each cross-fitted copy to the labels of the folds it learns from."""
        if self.cfg.mavias.bias_path == "experts" and not self.bias_fitted:
            if self.model.image_input and not self.cfg.preprocessing.augment:
                log.warning("mavias.bias_path experts without augmentation: the main model may only memorise the "
                            "few images the bias path gets wrong; set preprocessing.augment true, or "
                            "mavias.bias_path joint")
            experts = self._bias_experts()
            for k, (expert, learns) in enumerate(zip(experts, learned_by(self.fold, len(experts)), strict=True)):
                fit_bias_path(expert, self.model.head, self.train.embeddings, self.train.labels,
                              rows=learns.nonzero().squeeze(1), seed=k)
            self.bias_fitted = True

    def state_dict(self) -> dict:
        return {"bias_fitted": self.bias_fitted}

    def load_state_dict(self, state: dict) -> None:
        self.bias_fitted = bool(state.get("bias_fitted", False))

    def param_groups(self) -> list[dict]:
        lr = self.cfg.optim.lr
        return [
            {"params": list(self.model.parameters()), "lr": lr},
            {"params": list(self.projection.parameters()), "lr": lr * self.cfg.mavias.projection_lr_mult},
        ]

    def tag_logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.model.head(self.projection(embeddings))

    def loss(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        z_main = self.model(x)
        embeddings = self.train.embeddings[idx].to(x.device)
        m = self.cfg.mavias
        if m.bias_path == "joint":
            z_tag = self.tag_logits(embeddings)
            parts = mavias_loss(z_main, z_tag, y, alpha=m.alpha, lam=m.lam, align=m.align)
            total = parts.total
        else:
            # g alone fits y from the embedding (through the head, frozen here); the main model sees its logits fixed
            logits = torch.stack([frozen_head_logits(g(embeddings), self.model.head) for g in self._bias_experts()])
            z_tag, expert_loss = cross_fitted_expert(logits, self.fold[idx].to(x.device), y)
            parts = mavias_loss(z_main, z_tag.detach(), y, alpha=m.alpha, lam=m.lam, align=m.align)
            total = parts.total + expert_loss
        return total, {
            "loss": total.item(),
            "loss_cls": parts.classification.item(),
            "loss_align": parts.alignment.item(),
            "norm_main": z_main.float().norm(dim=1).mean().item(),
            "norm_tag": z_tag.float().norm(dim=1).mean().item(),
            "acc_tag": (z_tag.argmax(1) == y).float().mean().item(),  # near chance: the bias path carries nothing
        }


class GroupDRO(Method):
    """Online GroupDRO with the true group labels: the bias-label-aware oracle."""

    name = "groupdro"

    def __init__(self, cfg: TrainConfig, model: MainModel, train: SplitData):
        super().__init__(cfg, model, train)
        if train.groups is None:
            raise ValueError("GroupDRO needs true group labels for the training split")
        self.weights = torch.full((len(train.group_names),), 1.0 / len(train.group_names))

    def sampling_weights(self) -> torch.Tensor:
        """Group-balanced sampling as GroupDRO's authors train: weight 1/|group| per sample."""
        counts = torch.bincount(self.train.groups, minlength=len(self.train.group_names)).float()
        return 1.0 / counts[self.train.groups]

    def loss(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        per_sample = F.cross_entropy(self.model(x).float(), y, reduction="none")
        groups = self.train.groups[idx].to(x.device)
        loss, self.weights = group_dro_step(per_sample, groups, self.weights.to(x.device), self.cfg.groupdro.eta)
        return loss, {"loss": loss.item(), "max_group_weight": self.weights.max().item()}

    def state_dict(self) -> dict:
        return {"weights": self.weights.cpu()}

    def load_state_dict(self, state: dict) -> None:
        self.weights = state["weights"]


class JTT(Method):
    """Just Train Twice (Liu et al. 2021): upweight the training errors of a briefly trained ERM model.

    The errors are those of the un-augmented training images. Upweighting is done by sampling (weight ``upweight``
    for errors, 1 otherwise) with the epoch length kept at N: at an equal number of steps this draws every batch from
    the authors' upsampled set (N + (u - 1)|E| samples an epoch), which only counts its steps in longer epochs.
    """

    name = "jtt"

    def __init__(self, cfg: TrainConfig, model: MainModel, train: SplitData):
        super().__init__(cfg, model, train)
        self.errors: torch.Tensor | None = None

    def prepare(self, fit: Callable[[MainModel, int], None]) -> None:
        if self.errors is not None:
            return
        identifier = copy.deepcopy(self.model)  # the same initial (e.g. pretrained) weights as the main model
        fit(identifier, self.cfg.jtt.id_epochs)
        logits = predict_logits(identifier, self.train.unaugmented(), batch_size=256)  # the images, not a random crop
        self.errors = logits.argmax(1) != self.train.labels

    def sampling_weights(self) -> torch.Tensor:
        weights = torch.ones(len(self.train))
        weights[self.errors] = self.cfg.jtt.upweight
        return weights

    def state_dict(self) -> dict:
        return {"errors": self.errors}

    def load_state_dict(self, state: dict) -> None:
        self.errors = state["errors"]


class LfF(Method):
    """Learning from Failure (Nam et al. 2020): a biased twin trained with generalised CE (q 0.7) and the main model
    trained with CE weighted by the relative difficulty L_B / (L_B + L_D), from per-sample loss EMAs (decay 0.7),
    each divided by its class's maximum EMA as in the authors' code. Inference uses the main model only."""

    name = "lff"

    def __init__(self, cfg: TrainConfig, model: MainModel, train: SplitData):
        super().__init__(cfg, model, train)
        self.biased = copy.deepcopy(model)
        n = len(train)
        self.ema = {"b": torch.zeros(n), "d": torch.zeros(n)}
        self.seen = torch.zeros(n, dtype=torch.bool)

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model, "biased": self.biased}

    def param_groups(self) -> list[dict]:
        return [{"params": list(self.model.parameters()) + list(self.biased.parameters()), "lr": self.cfg.optim.lr}]

    def _class_normalised(self, key: str, idx: torch.Tensor) -> torch.Tensor:
        labels = self.train.labels
        class_max = torch.zeros(int(labels.max()) + 1).scatter_reduce(0, labels, self.ema[key], "amax")
        return self.ema[key][idx] / class_max[labels[idx]].clamp(min=1e-8)

    def loss(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        z_d, z_b = self.model(x).float(), self.biased(x).float()
        ce_d = F.cross_entropy(z_d, y, reduction="none")
        ce_b = F.cross_entropy(z_b, y, reduction="none")
        for key, values in (("b", ce_b), ("d", ce_d)):
            ema_update(self.ema[key], self.seen, idx, values.detach().cpu(), self.cfg.lff.ema)
        self.seen[idx] = True
        weight = relative_difficulty(self._class_normalised("b", idx), self._class_normalised("d", idx)).to(x.device)
        loss = (ce_d * weight).mean() + generalized_ce(z_b, y, self.cfg.lff.q).mean()
        return loss, {"loss": loss.item(), "mean_weight": weight.mean().item()}

    def state_dict(self) -> dict:
        return {"ema_b": self.ema["b"], "ema_d": self.ema["d"], "seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.ema = {"b": state["ema_b"], "d": state["ema_d"]}
        self.seen = state["seen"]


class SD(Method):
    """Spectral decoupling (Pezeshki et al. 2021) as the reference implementation writes it: CE + lambda z_y^2, the true
    class's logit squared, lambda 0.1 (:func:`~mavias.core.train.losses.spectral_decoupling`)."""

    name = "sd"

    def loss(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        loss = spectral_decoupling(self.model(x), y, self.cfg.sd.coefficient)
        return loss, {"loss": loss.item()}


class FLAC(Method):
    """FLAC-B (Sarridis et al. 2023) without bias labels: CE + alpha * the FLAC divergence between the main model's
    features and those of a frozen bias-capturing classifier: the trained ERM reference, as the reference
    implementation loads a fully trained vanilla model. Inference uses the main model only."""

    name = "flac"

    def __init__(self, cfg: TrainConfig, model: MainModel, train: SplitData, reference: Path | None = None):
        super().__init__(cfg, model, train)
        if reference is None:
            raise UserError("FLAC-B takes a trained vanilla model as its bias-capturing classifier",
                            hint="pass --reference ERM_RUN (a `mavias train --set method=erm` run of this data)")
        self.bias_model = copy.deepcopy(model)
        self.bias_model.load_state_dict(torch.load(reference, map_location="cpu", weights_only=True)["model"])
        self.bias_model.eval().requires_grad_(False)

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model, "bias_model": self.bias_model}

    def loss(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        features = self.model.features(x)
        with torch.no_grad():
            bias_features = self.bias_model.eval().features(x)
        ce = F.cross_entropy(self.model.head(features).float(), y)
        divergence = flac_divergence(bias_features, features, y, self.cfg.flac.d)
        loss = ce + self.cfg.flac.alpha * divergence
        return loss, {"loss": loss.item(), "loss_cls": ce.item(), "loss_flac": divergence.item()}


class DebiAN(Method):
    """DebiAN (Li et al. 2022), as its authors train it: two networks stepping in turn on two differently shuffled
    batches. The classifier's step: CE weighted by 1 + the probability of belonging to the discovered group of its
    class where it is less accurate (the discoverer in eval mode, no gradient). The discoverer's step (a copy of the
    initial model, one sigmoid output per class, its own optimizer of the same settings, the classifier in eval
    mode): maximise the classifier's equal-opportunity gap between the two groups it discovers per class. Inference
    uses the main model only."""

    name = "debian"

    def __init__(self, cfg: TrainConfig, model: MainModel, train: SplitData):
        super().__init__(cfg, model, train)
        self.discoverer = copy.deepcopy(model)
        self.discoverer_optimizer = make_optimizer(cfg.optim, [{"params": list(self.discoverer.parameters())}])
        self.generator = torch.Generator().manual_seed(cfg.seed + 1)  # the discoverer's own shuffle

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model, "discoverer": self.discoverer}

    def _discoverer_step(self, batch_size: int, device: torch.device) -> float:
        idx = torch.randint(len(self.train), (batch_size,), generator=self.generator)
        x = to_model_input(torch.stack([self.train.inputs[int(i)] for i in idx]), device)
        y = self.train.labels[idx].to(device)
        self.model.eval()
        with torch.no_grad():
            p_correct = F.softmax(self.model(x).float(), dim=1).gather(1, y[:, None]).squeeze(1)
        self.model.train()
        self.discoverer.train()
        p_group = torch.sigmoid(self.discoverer(x).float()).gather(1, y[:, None]).squeeze(1)
        loss = debian_losses(p_correct, p_group, y).discoverer
        self.discoverer_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.discoverer_optimizer.step()
        return loss.item()

    def loss(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        self.discoverer.eval()
        with torch.no_grad():
            p_group = torch.sigmoid(self.discoverer(x).float()).gather(1, y[:, None]).squeeze(1)
        logits = self.model(x).float()
        p_correct = F.softmax(logits, dim=1).gather(1, y[:, None]).squeeze(1).detach()
        weights = debian_losses(p_correct, p_group, y).weights
        classification = (F.cross_entropy(logits, y, reduction="none") * weights).mean()
        discoverer = self._discoverer_step(len(y), x.device)
        return classification, {"loss": classification.item(), "loss_discoverer": discoverer,
                                "mean_weight": weights.mean().item()}

    def state_dict(self) -> dict:
        return {"discoverer_optimizer": self.discoverer_optimizer.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.discoverer_optimizer.load_state_dict(state["discoverer_optimizer"])
        self.generator.set_state(state["generator"])


METHODS: dict[str, type[Method]] = {m.name: m for m in (Method, Mavias, GroupDRO, JTT, LfF, SD, FLAC, DebiAN)}


def build_method(cfg: TrainConfig, model: MainModel, train: SplitData, reference: Path | None = None) -> Method:
    """The method ``cfg`` names; ``reference``: the checkpoint of the ERM reference (FLAC-B's bias classifier)."""
    if cfg.method == "flac":
        return FLAC(cfg, model, train, reference)
    return METHODS[cfg.method](cfg, model, train)
