"""`mavias bench core` bookkeeping on hand-made outcomes: the summary over seeds and the floors' arithmetic."""

import pandas as pd
import pytest

from mavias.core.train.config import method_name
from mavias.errors import UserError
from mavias.tools.bench.core import (
    DEFAULT_MAVIAS,
    DEFAULTS,
    METHODS,
    ORACLE,
    benchmark_floors,
    choose_methods,
    method_config,
    peer_floor,
    summarise,
)


def _outcome(method: str, seed: int, wg: float, avg: float, criterion: str = "val_robust") -> dict:
    return {"benchmark": "b", "method": method, "seed": seed, "criterion": criterion, "epoch": 1,
            "metrics": {"wg_acc": wg, "avg_acc": avg}}


def _outcomes(mavias_wg: float, lff_wg: float = 0.41) -> list[dict]:
    rows = [_outcome(DEFAULTS, s, 0.20, 0.70, "val_acc") for s in (0, 1)]
    for method, wg in (("ERM", 0.30), ("JTT", 0.35), ("LfF", lff_wg), ("SD", 0.20), ("FLAC-B", 0.25),
                       ("DebiAN", 0.33), (ORACLE, 0.50), (DEFAULT_MAVIAS, mavias_wg),
                       ("MAVias" if DEFAULT_MAVIAS != "MAVias" else "MAVias-PoE", 0.0)):  # the other path: not judged
        rows += [_outcome(method, s, wg + 0.02 * (2 * s - 1), 0.80) for s in (0, 1)]  # seeds spread +-2 points
    return rows


def test_the_summary_is_the_mean_and_sd_over_seeds():
    summary = summarise(_outcomes(0.42))
    mavias = next(r for r in summary if r["method"] == DEFAULT_MAVIAS)
    assert mavias["seeds"] == 2 and mavias["wg_acc"] == pytest.approx({"mean": 0.42, "std": 0.02})


def test_a_summary_by_method_alone_leaves_out_a_runs_missing_figure():
    """The two-moons summary (no selection criterion): a seed without a figure does not drag its mean to NaN."""
    from mavias.tools.bench.suite import mean_and_sd

    rows = pd.DataFrame([{"method": "ERM", "seed": 0, "wg_acc": 0.4}, {"method": "ERM", "seed": 1, "wg_acc": None},
                         {"method": "MAVias", "seed": 0, "wg_acc": 0.9}])
    assert mean_and_sd(rows, ["method"]) == [{"method": "ERM", "seeds": 2, "wg_acc": {"mean": 0.4, "std": 0.0}},
                                             {"method": "MAVias", "seeds": 1, "wg_acc": {"mean": 0.9, "std": 0.0}}]


def test_floors_of_a_benchmark():
    floors = benchmark_floors(summarise(_outcomes(0.42)), n_classes=3)
    assert floors["mavias_minus_defaults_wg"] == pytest.approx(0.22)
    assert floors["mavias_minus_peer_wg"]["LfF"] == pytest.approx(0.01)
    assert floors["met"] == {"ERM (CLI defaults) balanced acc >= 2 x chance": True,
                             "tuned MAVias WG >= ERM (CLI defaults) WG + 10": True,
                             "every method above chance": True}
    assert not benchmark_floors(summarise(_outcomes(0.29)), n_classes=3)["met"][
        "tuned MAVias WG >= ERM (CLI defaults) WG + 10"]
    assert not benchmark_floors(summarise(_outcomes(0.42)), n_classes=1)["met"]["every method above chance"]


def test_mavias_must_lead_on_two_thirds_of_the_benchmarks_and_stay_within_3_points_elsewhere():
    def benchmarks(*mavias_wgs: float) -> dict:
        return {f"b{i}": {"floors": benchmark_floors(summarise(_outcomes(wg)), n_classes=3)}
                for i, wg in enumerate(mavias_wgs)}

    assert peer_floor(benchmarks(0.45, 0.42, 0.39))["met"]  # 2 of 3 ahead, the third 2 points behind LfF
    assert not peer_floor(benchmarks(0.45, 0.42, 0.37))["met"]  # 4 points behind LfF
    assert not peer_floor(benchmarks(0.45, 0.40, 0.40))["met"]  # ahead on 1 of 3 only


def test_a_run_of_some_methods_judges_only_what_ran():
    only_mavias = [o for o in _outcomes(0.42) if o["method"] in (DEFAULTS, DEFAULT_MAVIAS, "JTT")]
    floors = benchmark_floors(summarise(only_mavias), n_classes=3)
    assert floors["mavias_minus_peer_wg"] == {"JTT": pytest.approx(0.07)}
    assert floors["met"]["tuned MAVias WG >= ERM (CLI defaults) WG + 10"]
    without_mavias = benchmark_floors(summarise([o for o in only_mavias if o["method"] != DEFAULT_MAVIAS]),
                                      n_classes=3)
    assert "mavias_minus_peer_wg" not in without_mavias
    assert not peer_floor({"b": {"floors": without_mavias}})["met"]  # nothing compared is not a met floor


def test_methods_are_chosen_by_name_or_code_in_the_bench_order():
    assert choose_methods(["mavias-poe", "JTT", "flac", "mavias"]) == ["JTT", "FLAC-B", "MAVias", "MAVias-PoE"]
    assert choose_methods(["groupdro"]) == [ORACLE]
    assert choose_methods(None)[0] == "ERM"
    assert "MAVias-PoE-CF" not in choose_methods(None) and choose_methods(["mavias-poe-cf"]) == ["MAVias-PoE-CF"]
    with pytest.raises(UserError, match="unknown method 'MAVia'; use --method ERM or"):
        choose_methods(["MAVia"])


def test_every_method_starts_from_its_cli_defaults_and_what_its_name_changes():
    configs = {name: method_config(name) for name in METHODS}
    assert {name: cfg.method for name, cfg in configs.items()} == {name: s["method"] for name, s in METHODS.items()}
    assert (configs["MAVias"].mavias.bias_path, configs["MAVias-PoE"].mavias.bias_path) == ("joint", "experts")
    assert {name: method_name(cfg) for name, cfg in configs.items() if cfg.method == "mavias"} == {
        name: name for name in ("MAVias", "MAVias-PoE", "MAVias-PoE-CF")}  # the bench's names are the product's
    assert configs[ORACLE].selection == "val_true_wg" and configs["JTT"].selection != "val_true_wg"
    assert all(cfg.seed == 0 and cfg.length_factor is None for cfg in configs.values())
    assert {method_config(name, 3).length_factor for name in METHODS} == {3}  # equal compute: one length for all
