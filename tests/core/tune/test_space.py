"""What `mavias tune` searches: every method can be tuned, over two decades of learning rate and its own settings."""

import optuna
import pytest

from mavias.core.train.config import TrainConfig
from mavias.core.tune.space import METHOD_PARAMS, apply, current_values, known_space, search_space, suggest_config

METHODS = sorted(METHOD_PARAMS)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_has_a_valid_search_space_around_its_base(method):
    base = TrainConfig.model_validate({"method": method, "epochs": 12, "optim": {"lr": 0.05}})
    space = {param.key: param for param in search_space(base)}
    assert space["optim.lr"].low == pytest.approx(0.005) and space["optim.lr"].high == pytest.approx(0.5)  # 2 decades
    assert (space["epochs"].low, space["epochs"].high) == (6, 18)
    start = current_values(base, list(space.values()))
    assert apply(base, start) == base  # the search starts from the base settings
    for seed in range(3):
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
        cfg = suggest_config(trial, base, list(space.values()))
        assert cfg.method == method and all(space[k].contains(v) for k, v in trial.params.items())


def test_an_unresolved_base_fixes_only_the_methods_own_ranges():
    base = TrainConfig(method="mavias")
    assert {p.key for p in known_space(base)} == {"mavias.alpha", "mavias.lam", "mavias.projection_lr_mult"}
    with pytest.raises(ValueError, match="resolve the base config"):
        search_space(base)
