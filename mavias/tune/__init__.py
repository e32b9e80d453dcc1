"""Automatic hyperparameter search for MAVias (`mavias tune`)."""

from mavias.tune.search import TuneResult, suggest_config, tune

__all__ = ["TuneResult", "suggest_config", "tune"]
