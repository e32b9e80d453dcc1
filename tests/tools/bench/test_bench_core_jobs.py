"""`mavias bench core` hands a search's further seeds to the workers as soon as the search ends, so a long search does
not keep another method's seeds waiting; the report assembles every seed per method (training replaced by recorded
calls: what is under test is the scheduling and the bookkeeping)."""

import io
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from mavias.core.synthetic import Sources
from mavias.core.train.config import TrainConfig, save_config
from mavias.tools.bench import core
from mavias.utils.progress import StepProgress

SEEDS = 3


def _outcome(method: str, seed: int) -> dict:
    return {"benchmark": "b", "method": method, "seed": seed, "criterion": "val_robust", "epoch": 1,
            "metrics": {"wg_acc": seed / 10}}


def test_a_finished_searchs_seeds_run_while_another_search_still_runs(tmp_path, monkeypatch):
    fast_seed_started, order = threading.Event(), []

    def search_job(work, bench, method, trials, threads, sources, compute):
        if method == "slow":  # ends only once the fast method's further seeds are under way beside it
            assert fast_seed_started.wait(timeout=30), "the fast search's seeds waited for the slow search"
        order.append(f"search {method}")
        first = tmp_path / method / "seed0"
        save_config(TrainConfig(epochs=7), first / "config.yaml")
        return {"method": method, "benchmark": bench.name, "base": TrainConfig(), "root": tmp_path / method,
                "first_dir": first, "best_params": {"lr": 0.1}, "best_value": 0.9, "cost_ratio": 1.0,
                "choice": "trial 1",
                "seed0": {"seed": 0, "outcomes": [_outcome(method, 0)], "length": {"epochs": 7, "seconds": 1.0}}}

    def seed_job(work, bench, plan, seed, threads, sources):
        fast_seed_started.set()
        order.append(f"seed {seed} {plan['method']}")
        return {"seed": seed, "outcomes": [_outcome(plan["method"], seed)], "length": {"epochs": 5, "seconds": 2.0}}

    monkeypatch.setattr(core, "search_job", search_job)
    monkeypatch.setattr(core, "seed_job", seed_job)
    bench = SimpleNamespace(name="b")
    steps = StepProgress(2 * SEEDS, desc="test", file=io.StringIO())
    with ThreadPoolExecutor(2) as pool:
        searches = [(tmp_path, bench, method, 6, 1, Sources(), 3.0) for method in ("slow", "fast")]
        results = core._run_methods(pool, searches, SEEDS, steps)

    assert order.index("search slow") > order.index("seed 1 fast")
    assert [r["method"] for r in results] == ["slow", "fast"]  # the order asked for, not the order finished
    for result in results:
        assert [o["seed"] for o in result["outcomes"]] == [0, 1, 2]
        assert sorted(result["trained"]) == [0, 1, 2] and result["chosen"]["epochs"] == 7
        assert result["best_params"] == {"lr": 0.1} and result["choice"] == "trial 1"
    assert steps.bar.n == 2 * SEEDS


def test_the_costliest_search_starts_first_and_the_report_keeps_the_bench_order(tmp_path, monkeypatch):
    started = []

    def search_job(work, bench, method, trials, threads, sources, compute):
        started.append(method)
        first = tmp_path / method / "seed0"
        save_config(TrainConfig(epochs=3), first / "config.yaml")
        return {"method": method, "benchmark": bench.name, "base": TrainConfig(), "root": tmp_path / method,
                "first_dir": first, "best_params": {}, "best_value": None, "cost_ratio": None, "choice": None,
                "seed0": {"seed": 0, "outcomes": [_outcome(method, 0)], "length": {"epochs": 3, "seconds": 1.0}}}

    monkeypatch.setattr(core, "search_job", search_job)
    bench, methods = SimpleNamespace(name="b"), ["ERM", "SD", "DebiAN", "LfF"]
    with ThreadPoolExecutor(1) as pool:
        results = core._run_methods(pool, [(tmp_path, bench, m, 6, 1, Sources(), 3.0) for m in methods], 1,
                                    StepProgress(len(methods), desc="test", file=io.StringIO()))

    assert started[:2] == ["DebiAN", "LfF"] and started[-1] in ("ERM", "SD")
    assert [r["method"] for r in results] == methods


def test_a_failed_job_stops_the_bench_without_waiting_for_the_others():
    """A search that fails in its first hour is reported then, not after every other job: the queued jobs are
    cancelled and the running ones stopped (real worker processes)."""
    import operator
    import time

    import pytest

    start = time.monotonic()
    with pytest.raises(ZeroDivisionError):
        with core.job_pool(2) as pool:
            pool.submit(time.sleep, 120)  # running beside the failing job
            failing = pool.submit(operator.truediv, 1, 0)
            pool.submit(time.sleep, 120)  # queued behind them
            failing.result()
    assert time.monotonic() - start < 60  # neither sleeping job was waited for
