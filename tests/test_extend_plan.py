"""`coevolve run --resume DIR --budget N --plan` says what the extension will run (its logged steps as
done, kept as they were, then the steps the loop takes), and a resumed run's progress bar starts at the
evaluations it replays (walkthrough s51, findings 2 and 5)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from coevolve.base.config import build_config, read_toml
from coevolve.commands.run import extend
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.loop import SearchLoop
from coevolve.search.methods import extension_plan, run_plan
from coevolve.search.progress import ProgressBar
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask
from test_extend import config, start


def logged_steps(directory) -> list[tuple[str, int, bool]]:
    return [(e["operator"], len(e["requests"]), bool(e.get("es"))) for e in read_jsonl(directory / "events.jsonl")
            if e["type"] == "step"]


def planned(plan: dict) -> list[tuple[str, int, bool]]:
    return [(s["operator"], s["count"], s["perturbed"]) for s in plan["steps"]]


def test_the_plan_of_an_extension_is_the_steps_the_extended_run_logs(tmp_path):
    """Budget 13 cuts Sample+ESOpt's fourth step to 1 and EoH's (i1 4, e1 3, ...) budget 6 its e1 to 2:
    the cut step stays short and the raised budget goes to the steps after it, as the plan says."""
    for method, small, large in [("sample+esopt", 13, 25), ("eoh", 6, 12)]:
        directory = tmp_path / method
        start(directory, config(method, small))
        store = RunStore.open(directory)
        raw = read_toml(store.config_path)
        before = build_config(RunConfig, raw)
        larger = build_config(RunConfig, {**raw, "run": {**raw["run"], "budget": large}})
        plan = extension_plan(larger, store.events(), small)
        assert planned(plan) != planned(run_plan(larger))  # not the plan of a fresh run with the larger budget
        assert plan["done"] == len(logged_steps(directory))
        extended = SearchLoop(extend(store, raw, before, large), store, FakeEngine(), FakeEvaluator(), FakeTask())
        assert extended.run().evaluations == large == plan["evaluations"]
        assert planned(plan) == logged_steps(directory)


def test_the_printed_plan_says_done_to_run_the_raised_budget_and_the_sigma_restart(tmp_path, capsys):
    from coevolve.cli import main

    start(tmp_path / "r", config("sample+esopt", 13))
    assert main(["run", "--resume", str(tmp_path / "r"), "--budget", "25", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "budget raised 13 -> 25" in out
    assert "done: batch 4: i1 1  [1 evaluation]" in out  # the cut step, kept short
    assert "to run: batches 5-7 (3x): i1 4 (ES, 4 directions)  [12 evaluations]" in out
    assert "σ rises again here (a warm restart)" in out
    assert read_toml(tmp_path / "r" / "config.toml")["run"]["budget"] == 13  # --plan writes nothing
    # without ES there is no σ to restart
    start(tmp_path / "e", config("eoh", 6))
    assert main(["run", "--resume", str(tmp_path / "e"), "--budget", "12", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "done: generation 1: e1 2  [2 evaluations]" in out and "σ" not in out


def test_the_loop_marks_the_steps_it_replays(tmp_path):
    """A resumed run reports its replayed steps as replayed, so the bar starts after them."""
    start(tmp_path / "r", config("sample", 10))
    store = RunStore.open(tmp_path / "r")
    raw = read_toml(store.config_path)
    seen = []
    SearchLoop(extend(store, raw, build_config(RunConfig, raw), 20), store, FakeEngine(), FakeEvaluator(),
               FakeTask(), on_progress=lambda p: seen.append((p.used, p.replayed))).run()
    assert seen == [(5, True), (10, True), (15, False), (20, False)]


def test_a_resumed_bar_starts_at_the_replayed_evaluations_and_says_resumed():
    bar = ProgressBar(24, "eoh fake seed 0")  # a comparison's arm: made without `resuming`
    try:
        bar.update_from(SimpleNamespace(used=12, replayed=True, best=1.0, valid_rate=0.5, sigma=None))
        bar.update_from(SimpleNamespace(used=18, replayed=False, best=0.5, valid_rate=0.5, sigma=None))
        assert (bar.tqdm.initial, bar.tqdm.n) == (12, 18)  # rate and ETA count 6 evaluations, not 18
        assert bar.tqdm.desc == "eoh fake seed 0 (resumed)"
        fresh = ProgressBar(24, "eoh fake (resumed)")
        fresh.update_from(SimpleNamespace(used=6, replayed=True, best=None, valid_rate=0.0, sigma=None))
        assert fresh.tqdm.desc == "eoh fake (resumed)"  # said once
        fresh.close()
        agent = ProgressBar(36, "esopt sudoku (resumed)", unit="episode")  # an agent run's rounds alike
        agent.update_agent(SimpleNamespace(used=24, replayed=True, mean_reward=0.5, solved_rate=0.5, sigma=None,
                                           eval_reward=None))
        agent.update_agent(SimpleNamespace(used=36, replayed=False, mean_reward=0.5, solved_rate=0.5, sigma=None,
                                           eval_reward=None))
        assert (agent.tqdm.initial, agent.tqdm.n) == (24, 36)
        agent.close()
    finally:
        bar.close()


def test_an_agent_run_without_es_is_refused_more_budget_without_naming_an_es_schedule(tmp_path, capsys):
    from coevolve.agents.runconfig import AgentRunConfig
    from coevolve.base.config import as_dict, dump_toml
    from coevolve.cli import main

    trace2skill = build_config(AgentRunConfig, {"run": {"method": "trace2skill"}})
    assert not trace2skill.uses_es
    RunStore.create(tmp_path / "agent", dump_toml(as_dict(trace2skill)))
    assert main(["run", "--resume", str(tmp_path / "agent"), "--budget", "512", "--plan"]) == 2
    err = capsys.readouterr().err
    assert "an agent run's rounds are planned from its budget: start a new run" in err and "ES" not in err


def test_a_resumed_bar_is_started_once_however_many_steps_it_replays():
    """A bar was closed and made anew for every step replayed (a long run's resume drew hundreds): it is
    started once, after the replay, at its first live step; or at its close when none came (a run killed
    after its last step), ending where the replay did."""
    made = []

    class Counted(ProgressBar):
        def _bar(self, *args):
            made.append(args)
            return super()._bar(*args)

    def step(used: int, replayed: bool) -> SimpleNamespace:
        return SimpleNamespace(used=used, replayed=replayed, best=1.0, valid_rate=0.5, sigma=None)

    bar = Counted(100, "sample fake")
    try:
        for used in range(5, 55, 5):
            bar.update_from(step(used, True))
        bar.update_from(step(55, False))
        bar.update_from(step(60, False))
        assert made == [(100, "sample fake"), (100, "sample fake (resumed)", 50)]
        assert (bar.tqdm.initial, bar.tqdm.n) == (50, 60)
    finally:
        bar.close()
    made.clear()
    replayed_only = Counted(100, "sample fake")
    for used in (5, 10):
        replayed_only.update_from(step(used, True))
    replayed_only.close()
    assert made == [(100, "sample fake"), (100, "sample fake (resumed)", 10)] and replayed_only.tqdm.n == 10


def test_a_resumed_bar_times_its_first_live_step_from_the_sessions_start():
    """The bar after the replay is made when the first live step has ended: timed from its own making, that
    step's evaluations were done in no time (a walkthrough saw 16448 evals/s). It keeps the session's start."""
    bar = ProgressBar(16, "sample fake")
    try:
        began = bar.tqdm.start_t
        bar.update_from(SimpleNamespace(used=10, replayed=True, best=1.0, valid_rate=0.5, sigma=None))
        time.sleep(0.2)  # the first live step's work
        bar.update_from(SimpleNamespace(used=16, replayed=False, best=1.0, valid_rate=0.5, sigma=None))
        assert bar.tqdm.start_t == began
        rate = bar.tqdm.format_dict["rate"] or (bar.tqdm.n - bar.tqdm.initial) / (time.time() - began)
        assert rate < 6 / 0.2 + 1, rate
    finally:
        bar.close()
