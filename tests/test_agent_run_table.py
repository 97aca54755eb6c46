"""A single agent run's table, plot, timing and bar say what they show (walkthrough s54, findings 2, 5, 7,
8, 9, 14): the distilled skill's rules and origins, held-out progress's parts and protocol, the plot's axes,
each eval's own time, time summed over resumes, and the phase between rounds."""

from __future__ import annotations

import json

from test_agents_es import FakeEngine, make_config, play, start

from coevolve.agents.es_agent import run_agent
from coevolve.report import rendering
from coevolve.report.rendering import agent_table
from coevolve.runstore import RunStore
from coevolve.search import plot
from coevolve.search.progress import ProgressBar


def row(table, name):
    return next(line for line in table.splitlines() if line.lstrip().startswith(name))


def posthoc_run(tmp_path, **agent):
    config = make_config(method="esopt+trace2skill", budget=32, batch=2, eval_cases=1, distill_seeds=3,
                         validation_cases=2, **agent)
    store = start(tmp_path, config)
    return config, store, play(config, store, FakeEngine())


def test_the_posthoc_skill_row_counts_its_rules_and_says_tied_candidates(tmp_path):
    _, store, summary = posthoc_run(tmp_path)
    skill = row(agent_table(summary, store.dir), "distilled skill")
    assert summary.skill in skill and " rules" in skill
    # the chosen candidate's origins, logged as online distillation logs them (before: the rule count alone)
    event = [e for e in store.events() if e["type"] == "skill"][-1]
    assert event["origins"]["analyses"] >= 1 and not any("origins" in c for c in event["candidates"])
    assert "analyses gave a usable rule" in skill
    # the fake engine plays every candidate alike: validation chose nothing
    assert "3 candidates tied on validation: first kept" in skill


def test_an_online_skill_row_says_where_its_rules_came_from(tmp_path):
    config = make_config(method="esopt+trace2skill", budget=32, batch=2, eval_cases=1, skill_every=2,
                         distill="online")
    store = start(tmp_path, config)
    summary = play(config, store, FakeEngine())
    event = [e for e in store.events() if e["type"] == "skill"][-1]
    assert event["origins"]["analyses"] >= 1
    skill = row(agent_table(summary, store.dir), "distilled skill")
    assert "analyses gave a usable rule" in skill and "tied" not in skill


def test_held_out_rows_name_the_protocol_and_progress_parts(tmp_path):
    _, store, summary = posthoc_run(tmp_path)
    table = agent_table(summary, store.dir)
    assert row(table, "held-out protocol").endswith(" greedy, 1 problem per evaluation")
    before = row(table, "held-out before")
    assert "well-formed" in before and "(constrained)" in before and "right cells" in before


def test_the_progress_plot_counts_training_episodes_on_a_reward_axis(tmp_path, monkeypatch):
    _, store, summary = posthoc_run(tmp_path)
    figures = []
    monkeypatch.setattr(plot, "save_figure", lambda fig, path: figures.append(fig) or path)
    rendering.render_agent_run(RunStore.open(store.dir), summary)
    ax = figures[0].axes[0]
    assert ax.get_xlabel() == "training episodes" and ax.get_ylim() == (0.0, 1.0)


def test_each_eval_logs_its_own_time_and_timing_sums_the_sessions(tmp_path):
    config, store, _ = posthoc_run(tmp_path)
    evals = [json.loads(line) for line in (store.dir / "eval.jsonl").read_text().splitlines()]
    assert all(0 <= e["eval_s"] <= e["seconds"] for e in evals)
    events = store.events_path.read_text().splitlines(keepends=True)
    rounds = [i for i, line in enumerate(events) if '"type": "round"' in line]
    store.events_path.write_text("".join(events[: rounds[1] + 1]))  # killed after round 1
    store.history_path.write_text("".join(store.history_path.read_text().splitlines(keepends=True)[:2]))
    (store.dir / "summary.json").unlink()
    (store.dir / "timing.json").write_text(json.dumps({"total_s": 100.0}))  # the killed session's time
    play(config, RunStore.open(store.dir), FakeEngine())
    timing = json.loads((store.dir / "timing.json").read_text())
    assert timing["total_s"] >= 100.0 + timing["session_s"] - 0.01 and timing["session_s"] < 100.0


def test_the_run_names_its_phases_between_rounds(tmp_path):
    config = make_config(method="esopt+trace2skill", budget=32, batch=2, eval_cases=1, distill_seeds=3,
                         validation_cases=2)
    phases = []
    run_agent(config, start(tmp_path, config), FakeEngine(), config.build_task(), on_phase=phases.append)
    assert phases[0] == "held-out eval" and phases[1] is None
    assert "distilling (best of 3, 2 validation puzzles)" in phases and phases[-1] is None


def test_the_bar_shows_the_phase_and_takes_it_away():
    bar = ProgressBar(10, "esopt sudoku", unit="episode")
    try:
        bar.update(4, {"reward": "0.500"})
        bar.phase("held-out eval")
        assert "now=held-out eval" in bar.tqdm.postfix and "reward=0.500" in bar.tqdm.postfix
        bar.phase(None)
        assert "now" not in bar.tqdm.postfix
    finally:
        bar.close()


def test_a_phase_ending_during_a_replay_leaves_the_replay_alone():
    bar = ProgressBar(10, "esopt sudoku", unit="episode")
    try:
        bar.update_agent(type("P", (), {"used": 4, "mean_reward": 0.5, "solved_rate": 0.5, "sigma": None,
                                        "eval_reward": None, "replayed": True})())
        bar.phase(None)  # a replayed round's end: the bar still starts after the replay, once
        assert bar.replayed is not None
        bar.phase("held-out eval")  # live work: the replay is over
        assert bar.replayed is None and bar.tqdm.n == 4
    finally:
        bar.close()


def test_the_plan_names_the_sigma_the_generations_play():
    """A one-generation schedule plays its start alone (the plan said `σ 0.003 -> 0.001 (cosine) over 1
    generations`); one the budget cuts short says where it stops."""
    from coevolve.agents.es_agent import sigma_plan
    from coevolve.es.config import ESConfig

    assert sigma_plan(ESConfig(sigma=3e-3, sigma_end=1e-3, generations=1), 1) == "σ 0.003 (one generation)"
    assert sigma_plan(ESConfig(sigma=3e-3, schedule="constant", generations=4), 4) == "σ 0.003 (constant)"
    assert sigma_plan(ESConfig(sigma=3e-3, sigma_end=1e-3, generations=3), 3) == \
        "σ 0.003 -> 0.001 (cosine) over 3 generations"
    assert sigma_plan(ESConfig(sigma=3e-3, sigma_end=1e-3, generations=3), 2) == \
        "σ 0.003 -> 0.001 (cosine) over 3 generations, 0.002 at the last one played"
