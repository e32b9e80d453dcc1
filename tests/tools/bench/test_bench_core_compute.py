"""`mavias bench core` trains every method for the same number of steps unless told otherwise: a debiasing method's
own length, ERM's included, so that a lead is never bought with a longer training (the searches and trainings are
replaced by recorded calls)."""

from types import SimpleNamespace

import pytest

from mavias.core.train.recipe import DEBIASING_LENGTH
from mavias.tools.bench import core


def _outcome(method: str, criterion: str) -> dict:
    return {"benchmark": "b", "method": method, "seed": 0, "criterion": criterion, "epoch": 1,
            "metrics": {"wg_acc": 0.5, "avg_acc": 0.8}}


def _ran(job: tuple, searches: list) -> dict:
    searches.append(job)
    return {"method": job[2], "benchmark": "b", "outcomes": [_outcome(job[2], "val_robust")], "chosen": {},
            "trained": {}, **dict.fromkeys(core.SEARCH_FIELDS)}


@pytest.mark.parametrize(("asked", "trained"), [(None, DEBIASING_LENGTH), (1.0, 1.0)])
def test_every_method_gets_one_length(tmp_path, monkeypatch, asked, trained):
    searches = []
    bench = SimpleNamespace(name="b", slug="b", held_out=False)
    monkeypatch.setattr(core, "choose", lambda names, share: [bench])
    monkeypatch.setattr(core, "prepare", lambda work, b, sources: (SimpleNamespace(classes=["x", "y"]), tmp_path))
    monkeypatch.setattr(core, "sources_measured", lambda folder: {})
    monkeypatch.setattr(core, "_run_jobs", lambda pool, jobs, steps: [[_outcome("ERM (CLI defaults)", "val_acc")]])
    monkeypatch.setattr(core, "_run_methods", lambda pool, jobs, seeds, steps: [_ran(job, searches) for job in jobs])

    report = core.run_core_bench(tmp_path, seeds=1, trials=0, methods=["ERM", "JTT", "MAVias-PoE"], moons=False,
                                 compute=asked)

    assert [job[2] for job in searches] == ["ERM", "JTT", "MAVias-PoE"]
    assert {job[-1] for job in searches} == {trained}
    assert report["compute"] == f"{trained:g} x the recipe's steps, every method"
    root = core._method_root(tmp_path, bench, core.Sources(), "MAVias-PoE", trained, 0)
    assert root.name == f"mavias-poe-x{trained:g}"


def test_a_search_of_another_budget_lives_apart_and_the_report_says_the_searched_length(tmp_path):
    """Resuming a work folder with --trials 2 after --trials 6 (or 0) must not report the other budget's choices."""
    bench = SimpleNamespace(name="b", slug="b")
    roots = {trials: core._method_root(tmp_path, bench, core.Sources(), "JTT", 3.0, trials) for trials in (0, 2, 6)}
    assert len(set(roots.values())) == 3
    assert "0.5-1.5 x that" in core.compute_label(3.0, 6) and "to start" in core.compute_label(3.0, 6)
