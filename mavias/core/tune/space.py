"""What `mavias tune` searches: the learning rate over two decades around the base, the epochs, and each method's own
settings, at ranges around its paper's values (not fitted to any benchmark)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna

from mavias.core.train.config import TrainConfig


@dataclass(frozen=True)
class Param:
    """One searched setting: a dotted config key and its range."""

    key: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def suggest(self, trial: optuna.Trial) -> float | int:
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, log=self.log)

    def contains(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return self.low <= value <= self.high and (not self.integer or float(value).is_integer())


METHOD_PARAMS: dict[str, list[Param]] = {
    "erm": [],
    "mavias": [Param("mavias.alpha", 1e-3, 1.0, log=True), Param("mavias.lam", 0.2, 0.9),
               Param("mavias.projection_lr_mult", 0.3, 30.0, log=True)],
    # GroupDRO's paper trains with a strong L2 penalty (its own setting per dataset): searched here
    "groupdro": [Param("groupdro.eta", 1e-3, 0.1, log=True), Param("optim.weight_decay", 1e-4, 1.0, log=True)],
    "jtt": [Param("jtt.upweight", 5.0, 100.0, log=True)],
    "lff": [Param("lff.q", 0.3, 1.0), Param("lff.ema", 0.5, 0.99)],
    "sd": [Param("sd.coefficient", 1e-3, 1.0, log=True)],
    "flac": [Param("flac.alpha", 10.0, 1000.0, log=True)],
    "debian": [],
}
LR_DECADES = 1.0  # the learning rate is searched over base x 10^-1 .. base x 10^1: two decades
EPOCH_FACTORS = (0.5, 1.5)


def search_space(base: TrainConfig) -> list[Param]:
    """The searched settings of ``base.method`` around ``base`` (whose lr and epochs must be set)."""
    if base.optim.lr is None or base.epochs is None:
        raise ValueError("resolve the base config (learning rate and epochs) before searching around it")
    return known_space(base)


def known_space(base: TrainConfig) -> list[Param]:
    """The searched settings whose ranges ``base`` already fixes: the method's own, and the learning rate and the
    epochs once they are set (the recipe sets them when training starts)."""
    common = []
    if base.optim.lr is not None:
        lr = base.optim.lr
        common.append(Param("optim.lr", lr * 10**-LR_DECADES, lr * 10**LR_DECADES, log=True))
    if base.epochs is not None:
        low = max(1, math.floor(EPOCH_FACTORS[0] * base.epochs))
        common.append(Param("epochs", low, max(low, round(EPOCH_FACTORS[1] * base.epochs)), integer=True))
        if base.method == "jtt":  # the identification model trains for part of the run
            common.append(Param("jtt.id_epochs", 1, max(1, base.epochs // 3), integer=True))
    return common + list(METHOD_PARAMS[base.method])


def searched_keys(method: str) -> list[str]:
    """Every setting a search of ``method`` varies, whatever the base."""
    own = {"jtt": ["jtt.id_epochs"]}.get(method, [])
    return ["optim.lr", "epochs", *own, *(param.key for param in METHOD_PARAMS[method])]


def current_values(cfg: TrainConfig, space: list[Param]) -> dict[str, float | int]:
    """``cfg``'s values of the searched settings (the first trial of a search, or a warm start); a setting ``cfg``
    leaves unset (resolved per run, e.g. the weight decay) is left to the sampler."""
    dumped = cfg.model_dump()
    values = {}
    for param in space:
        node = dumped
        for part in param.key.split("."):
            node = node[part]
        if node is not None:
            values[param.key] = _clip(param, node)
    return values


def _clip(param: Param, value: float) -> float | int:
    """A base value outside its range (e.g. JTT's 2 identification epochs in a 4-epoch run) at the nearest bound."""
    clipped = min(max(value, param.low), param.high)
    return int(clipped) if param.integer else float(clipped)


def apply(base: TrainConfig, values: dict[str, float | int]) -> TrainConfig:
    """``base`` with the dotted settings of ``values`` replaced, validated."""
    data = base.model_dump()
    for key, value in values.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return TrainConfig.model_validate(data)


def suggest_config(trial: optuna.Trial, base: TrainConfig, space: list[Param]) -> TrainConfig:
    return apply(base, {param.key: param.suggest(trial) for param in space})
