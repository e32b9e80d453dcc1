"""Which trial a search keeps: the best criterion, ties broken as between a run's epochs."""

import json

import optuna

from mavias.core.tune.search import TuneResult, best_trial


def _trial(tmp_path, number: int, value: float, val_acc: float | None) -> optuna.trial.FrozenTrial:
    run_dir = tmp_path / f"trial{number}"
    run_dir.mkdir()
    if val_acc is not None:
        best = {"val_true_wg": {"epoch": 3, "score": value, "val_acc": val_acc}}
        (run_dir / "train_summary.json").write_text(json.dumps({"best": best}))
    trial = optuna.trial.create_trial(value=value, params={"optim.lr": 0.1},
                                      distributions={"optim.lr": optuna.distributions.FloatDistribution(0.01, 1.0)},
                                      user_attrs={"run_dir": str(run_dir)})
    trial.number = number
    return trial


def test_a_tie_on_the_criterion_goes_to_the_higher_validation_accuracy(tmp_path):
    trials = [_trial(tmp_path, 0, 0.75, 0.96), _trial(tmp_path, 1, 0.75, 0.99), _trial(tmp_path, 2, 0.5, 1.0)]
    assert best_trial(trials, "val_true_wg").number == 1


def test_a_better_criterion_wins_over_accuracy_and_an_exact_tie_keeps_the_earlier(tmp_path):
    trials = [_trial(tmp_path, 0, 0.75, 0.99), _trial(tmp_path, 1, 0.8, 0.90), _trial(tmp_path, 2, 0.8, 0.90)]
    assert best_trial(trials, "val_true_wg").number == 1
    assert best_trial([_trial(tmp_path, 3, 0.5, None), _trial(tmp_path, 4, 0.5, None)], "val_true_wg").number == 3


def test_the_choice_says_which_trial_won_and_what_the_starting_settings_scored(tmp_path):
    def result(trial, start):
        return TuneResult(tmp_path, {}, 1.0, None, None, trial=trial, start_value=start)

    assert result(0, 1.0).choice("val_robust") == "the starting settings (trial 0, val_robust 1.0000)"
    moved = result(3, 0.99957).choice("val_robust")
    assert moved.startswith("trial 3 (val_robust 1.0000") and "trial 0: 0.9996" in moved
    assert "trial 0: did not finish" in result(2, None).choice("val_robust")
