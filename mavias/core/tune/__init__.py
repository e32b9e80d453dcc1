"""Automatic hyperparameter search for any training method (`mavias tune`)."""

from mavias.core.tune.search import TuneResult, tune
from mavias.core.tune.space import search_space, suggest_config

__all__ = ["TuneResult", "search_space", "suggest_config", "tune"]
