"""`--resume DIR --budget N` and the settings a method derives from the budget (Method.budget_scaled).

Islands under `islands.reset_every = 0` reset every quarter of run.budget: a larger budget moves the
period, and replaying the logged steps under it would rewrite the islands they logged
(population/gen_NNNN.json). Such an extension is refused, one line naming the setting and the way out,
as EoH's `m_multiplier = 0` is; a period of the run's own, or a raise the period survives, extends.
Fake engine, real loop and run store, as tests/test_extend.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml, read_toml
from coevolve.base.errors import UsageError
from coevolve.commands.run import extend
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search import methods as registry
from coevolve.search.loop import SearchLoop
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask


def config(method: str, budget: int, **sections) -> RunConfig:
    """EoH's plan here: i1 4, then e1 3, e2 3, m1 3, m2 3 per generation (16: the first one)."""
    return build_config(RunConfig, {
        "run": {"method": method, "task": "fake", "budget": budget, "seed": 3},
        "eoh": {"population": 4, "offspring": 3}, **sections})


def start(directory: Path, cfg: RunConfig):
    store = RunStore.create(directory, dump_toml(as_dict(cfg)))
    return SearchLoop(cfg, store, FakeEngine(), FakeEvaluator(), FakeTask()).run()


def go_on(directory: Path, budget: int):
    store = RunStore.open(directory)
    raw = read_toml(store.config_path)
    larger = extend(store, raw, build_config(RunConfig, raw), budget)
    return SearchLoop(larger, store, FakeEngine(), FakeEvaluator(), FakeTask()).run()


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_an_islands_run_whose_reset_period_follows_the_budget_is_not_extended(tmp_path, capsys):
    """reset_every = 0 at budget 16: a reset every 4 evaluations; at 28 it would be every 7."""
    from coevolve.cli import main

    run = tmp_path / "islands"
    start(run, config("islands", 16))
    before = files(run)
    line = (f"cannot give {run} a budget of 28: its plan depends on the budget: islands.reset_every = 0 (a quarter "
            "of run.budget) comes to 7 at run.budget = 28 where the run had 4, and its logged steps would be replayed "
            "under it: start a new run with the larger budget (with the setting given a number of its own, a later "
            "--budget can extend that run)")
    with pytest.raises(UsageError) as refused:
        go_on(run, 28)
    assert str(refused.value) == line
    assert files(run) == before  # config.toml, the log and every logged snapshot as they were
    # --plan says what the run would
    assert main(["run", "--resume", str(run), "--budget", "28", "--plan"]) == 2
    assert capsys.readouterr().err.strip() == f"coevolve run: error: {line}"
    assert files(run) == before


def test_an_islands_run_with_a_period_of_its_own_is_extended_and_keeps_its_islands(tmp_path):
    """reset_every = 4: the logged snapshots stay byte for byte, and the extended run is the run that had
    28 from the start."""
    own = {"islands": {"reset_every": 4}}
    start(tmp_path / "grown", config("islands", 16, **own))
    logged = {name: data for name, data in files(tmp_path / "grown").items() if name.startswith("population/")}
    grown = go_on(tmp_path / "grown", 28)
    after = files(tmp_path / "grown")
    assert {name: after[name] for name in logged} == logged
    fresh = start(tmp_path / "fresh", config("islands", 28, **own))
    assert grown.model_dump(exclude={"timing", "context"}) == fresh.model_dump(exclude={"timing", "context"})
    assert {n: d for n, d in after.items() if n.startswith("population/")} == \
        {n: d for n, d in files(tmp_path / "fresh").items() if n.startswith("population/")}


def test_a_raise_the_budget_scaled_settings_survive_is_extended(tmp_path):
    """16 -> 17: the period stays 4 (17 // 4); EoH's k = T / 12 - 1 goes from 0.33 to 0.42, but m1/m2 still
    ask round(3 k) = 1 each, so the logged steps replay as they were (the e2 step 16 cut to 1 stays short)."""
    start(tmp_path / "islands", config("islands", 16))
    assert go_on(tmp_path / "islands", 17).evaluations == 17
    scaled = {"eoh": {"population": 4, "offspring": 3, "m_multiplier": 0, "generations": 2}}
    start(tmp_path / "eoh", config("eoh", 16, **scaled))
    assert go_on(tmp_path / "eoh", 17).evaluations == 17
    steps = [e for e in read_jsonl(tmp_path / "eoh" / "events.jsonl") if e["type"] == "step"]
    assert [len(s["requests"]) for s in steps] == [4, 3, 3, 1, 1, 3, 1, 1]


@pytest.mark.parametrize("method", ["eoh", "islands", "map_elites", "pareto"])
def test_each_method_says_which_of_its_settings_follow_the_budget(method):
    """Only EoH's m_multiplier = 0 (and so every archive over EoH) and the islands' reset_every = 0 follow
    run.budget; MAP-Elites' grid and the Pareto front's size do not."""
    fixed = registry.make_method(config(method, 40, islands={"reset_every": 8}) if method == "islands"
                                 else config(method, 40))
    assert fixed.budget_scaled() == {}
    scaled = {"eoh": {"population": 4, "offspring": 3, "m_multiplier": 0, "generations": 2}}
    said = registry.make_method(config(method, 40, **scaled)).budget_scaled()
    # k = 40 / 12 - 1 = 2.33: m1, m2 ask round(3 k) = 7; the islands' period: 40 // 4
    assert said == {"eoh.m_multiplier = 0 (m1, m2 candidates per step from run.budget)": 7,
                    **({"islands.reset_every = 0 (a quarter of run.budget)": 10} if method == "islands" else {})}


@pytest.mark.parametrize("method", ["map_elites", "pareto", "islands"])
def test_an_archive_over_a_budget_scaled_eoh_is_refused_naming_the_setting(method):
    """The inner EoH's m_multiplier = 0 is the archive's too (OverMethod): the line names it after the step."""
    own = {"islands": {"reset_every": 4}} if method == "islands" else {}
    cfg = config(method, 16, eoh={"population": 4, "offspring": 3, "m_multiplier": 0, "generations": 2}, **own)
    raw = as_dict(cfg)
    problem = registry.extension_problem(cfg, build_config(RunConfig, {**raw, "run": {**raw["run"], "budget": 40}}))
    assert problem == ("its plan depends on the budget: step 3 would be m1 x 7 (generation 1) where the run planned "
                       "m1 x 1 (generation 1); eoh.m_multiplier = 0 (m1, m2 candidates per step from run.budget) "
                       "follows the budget: start a new run with the larger budget (with the setting given a "
                       "number of its own, a later --budget can extend that run)")


def test_a_reset_period_longer_than_the_budget_names_the_way_out():
    """No flag sets reset_every: `--budget 24` on a config that says 50 must say what to edit."""
    with pytest.raises(UsageError) as refused:
        config("islands", 24, islands={"reset_every": 50})
    assert str(refused.value) == ("config error: islands.reset_every is longer than the budget (run.budget = 24): no "
                                  "island would ever be reset (got 50); set islands.reset_every <= 24 in the config, "
                                  "or 0: a quarter of run.budget")


def test_the_islands_example_says_how_to_run_it_at_a_smaller_budget():
    """Its header names the setting `--budget N` alone cannot shrink, and its way out builds."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "examples" / "tsp_aco_islands.toml").read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    assert "reset_every" in header and "--budget N" in header
    raw = read_toml(root / "examples" / "tsp_aco_islands.toml")
    for period in (24, 0):
        cfg = build_config(RunConfig, {**raw, "run": {**raw["run"], "budget": 24},
                                       "islands": {**raw["islands"], "reset_every": period}})
        assert cfg.run.budget == 24
