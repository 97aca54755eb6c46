"""Islands, MAP-Elites and a user's method file on the real engine, sandbox
and TSP task (tiny budgets, the session engine): every evaluation charged;
MAP-Elites and the method file stopped at a step boundary by a cap and resumed
to the identical summary and archive snapshots (the islands' resume at every
step is test_search_methods.py's; a SIGKILL inside a step is the loop's, not a
method's, and is tested in test_run_e2e.py through fresh `coevolve run`
processes), the heat map in `coevolve report RUN_DIR`, and the user's method
compared with its +ESOpt pair and reported through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml, load_config
from coevolve.base.records import SearchSummary, read_summary
from coevolve.plan import RunSpec
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.runconfig import RunConfig
from test_run_e2e import TINY
from test_search_methods import TOY, write_toy

# MAP-Elites over a descriptor of the decisions (tsp_construct's `nearest`, described by the sandbox's
# worker) and one of the per-instance objectives (the sandbox's profile)
SECTIONS = {"islands": {"islands": 2, "reset_every": 4}, "map_elites": {"descriptors": ["nearest", "wins"], "bins": 4}}
# A small EoH for the archive methods with ES: i1 x2, e1 x1, e2 x1, then the perturbed m1 x2 (one ES update, the
# islands' reset after 4 evaluations) within a budget of 6, every operator kind run
SMALL_EOH = {"eoh": {"population": 2, "offspring": 1}}


def config_for(method: str, budget: int, seed: int = 0, **extra) -> RunConfig:
    raw = {"run": {"method": method, "task": "tsp_construct", "budget": budget, "seed": seed}, **TINY, **SECTIONS,
           **extra}
    raw = {k: v for k, v in raw.items() if k not in SECTIONS or method.startswith(k)}
    return build_config(RunConfig, json.loads(json.dumps(raw)))


@pytest.fixture(scope="module")
def sandbox():
    from coevolve.sandbox import Sandbox

    with Sandbox(workers=2, timeout_s=20) as sb:
        yield sb


def run_in_process(directory: Path, config: RunConfig, engine, sandbox, resume: bool = False) -> SearchSummary:
    from coevolve.search.loop import SearchLoop
    from tasks.registry import get_task

    store = RunStore.open(directory) if resume else RunStore.create(directory, dump_toml(as_dict(config)))
    try:
        return SearchLoop(config, store, engine, sandbox, get_task("tsp_construct")).run()
    finally:
        if read_jsonl(store.history_path):
            engine.reset()  # leave the session engine's weights as we found them


def stopped_then_resumed(directory: Path, config: RunConfig, engine, sandbox) -> SearchSummary:
    """Stopped by a completion-token cap after its first step, then resumed with the cap lifted."""
    capped = build_config(RunConfig, {**as_dict(config), "caps": {"completion_tokens": 1}})
    first = run_in_process(directory, capped, engine, sandbox)
    assert first.stopped and first.stopped["step"] == 1
    (directory / "config.toml").write_text(dump_toml(as_dict(config)))
    if config.uses_es:  # a resumed process starts from the base weights and replays history.jsonl
        engine.reset()
    return run_in_process(directory, config, engine, sandbox, resume=True)


def same_run(a: SearchSummary, b: SearchSummary) -> None:
    for key in ("evaluations", "ledger", "valid", "failures", "best", "best_so_far", "population"):
        assert getattr(a, key) == getattr(b, key), key
    assert (a.es and a.es.checksum) == (b.es and b.es.checksum)


def snapshots(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((directory / "population").glob("gen_*.json"))]


def steps_logged_once(again: Path, full: Path) -> None:
    """The resumed run's log holds each of the uninterrupted run's steps once: nothing charged twice."""
    steps = len(list(RunStore(full).iter_events("step")))
    assert [e["step"] for e in RunStore(again).iter_events("step")] == list(range(steps))


@pytest.mark.engine
@pytest.mark.timeout(1800)
def test_map_elites_is_budget_exact_resumes_and_draws_its_grid(tmp_path, engine, sandbox):
    """An uninterrupted run and one stopped after its first step and resumed, both on the session engine
    (two engine instances are not guaranteed to sample the same tokens, so both runs use one)."""
    from coevolve.cli import main

    # The template seeded into the grid: the grid holds a program whatever the model writes. (Late in the
    # full suite the same seed's 9 proposals, the budget then, gave no valid program at all, while alone they
    # fill cells: what the engine samples there differs, see the closing note of stop s27.)
    config = config_for("map_elites+esopt", 6, seed=1, context={"seed_template": True}, **SMALL_EOH)
    full = run_in_process(tmp_path / "full", config, engine, sandbox)
    assert full.evaluations == 6 == sum(full.ledger.outcomes.values()) == full.ledger.llm_requests
    assert full.es.updates >= 1
    grid = snapshots(tmp_path / "full")[-1]["grid"]
    assert grid["cells"]  # programs in the grid: its step-by-step equality after the stop is not vacuous
    assert sorted(c["id"] for c in grid["cells"]) == sorted(full.population) and 0 in full.population
    assert full.ledger.seeded == 1  # the seed: scored, not charged
    assert all(0.0 <= c["descriptors"][1] <= 1.0 for c in grid["cells"])  # wins: a share of the instances
    seed = next(e for e in RunStore(tmp_path / "full").iter_events("seed"))
    described = {c["id"]: c.get("behaviour") for c in read_jsonl(tmp_path / "full" / "candidates.jsonl")}
    described[0] = seed["result"]["behaviour"]
    assert all(c["descriptors"][0] == described[c["id"]]["nearest"] for c in grid["cells"])  # as the worker said

    # stopped and resumed: the same summary, every step logged once, the grid the same step by step
    same_run(stopped_then_resumed(tmp_path / "again", config, engine, sandbox), full)
    steps_logged_once(tmp_path / "again", tmp_path / "full")
    assert [s["grid"] for s in snapshots(tmp_path / "again")] == [s["grid"] for s in snapshots(tmp_path / "full")]
    assert main(["report", str(tmp_path / "full")]) == 0
    assert "![map_elites](map_elites.png)" in (tmp_path / "full" / "report.md").read_text()
    assert (tmp_path / "full" / "map_elites.png").stat().st_size > 1000


@pytest.mark.engine
@pytest.mark.timeout(1800)
def test_islands_spend_the_budget_and_reset_on_the_real_engine(tmp_path, engine, sandbox):
    """Uninterrupted only: the islands' resume after every step is test_search_methods.py's (fake engine,
    killed at random steps); a stop and resume of an archive method on the real engine is MAP-Elites' above."""
    config = config_for("islands+esopt", 6, seed=4, **SMALL_EOH)
    full = run_in_process(tmp_path / "full", config, engine, sandbox)
    assert full.evaluations == 6 == sum(full.ledger.outcomes.values()) == full.ledger.llm_requests
    assert full.es.updates >= 1
    last = snapshots(tmp_path / "full")[-1]
    assert last["resets"] and len(last["islands"]) == 2
    assert sorted({i for island in last["islands"] for i in island}) == sorted(full.population)


@pytest.mark.engine
@pytest.mark.timeout(1200)
def test_pareto_keeps_the_real_sandboxs_per_instance_winners_and_draws_parents_from_them(tmp_path, engine, sandbox):
    """The front in each step's snapshot is what the candidates' per-instance objectives (the real sandbox's
    profiles of 64 tours) make of them, recomputed here; every parented request drew its parents from the
    front after the step before. The template is seeded, so the front holds a program from the first step."""
    import numpy as np

    config = config_for("pareto", 9, seed=3, context={"seed_template": True})
    full = run_in_process(tmp_path / "full", config, engine, sandbox)
    assert full.evaluations == 9 == full.ledger.llm_requests
    candidates = {c["id"]: c for c in read_jsonl(tmp_path / "full" / "candidates.jsonl")}
    # candidates.jsonl leaves profiles out; each step's event holds its results (with them) in the order of
    # its candidates (a run whose proposals were all invalid never needed them: every front held the template)
    for event in RunStore(tmp_path / "full").iter_events("step"):
        ids = sorted(cid for cid, c in candidates.items() if c["step"] == event["step"])
        assert len(ids) == len(event["results"]), event["step"]
        for cid, result in zip(ids, event["results"]):
            if "profile" in result:
                candidates[cid]["profile"] = result["profile"]
    seed = next(RunStore(tmp_path / "full").iter_events("seed"))
    candidates[0] = {"id": 0, "step": -1, "objective": seed["result"]["objective"],
                     "profile": seed["result"]["profile"], "duplicate_of": None, "parents": []}
    assert len(candidates[0]["profile"]) == 64
    fronts = snapshots(tmp_path / "full")
    drawn = 0
    for step, snapshot in enumerate(fronts):
        scored = [c for c in candidates.values() if c["step"] < step + 1 and c["objective"] is not None
                  and c["duplicate_of"] is None]
        table = np.array([c["profile"] for c in scored])
        best = table.min(axis=0)  # shorter tours are better
        winners = [c for c, row in zip(scored, table) if (row == best).any()]
        expected = set()
        for c in winners:  # undominated among the winners; of equal profiles the earliest
            row = np.array(c["profile"])
            if not any(np.all(np.array(o["profile"]) <= row) and (np.any(np.array(o["profile"]) < row)
                                                                   or o["id"] < c["id"]) for o in winners if o is not c):
                expected.add(c["id"])
        assert {w["id"] for w in snapshot["pareto"]["wins"]} == expected, step
        if step + 1 < len(fronts):
            front = {w["id"] for w in snapshot["pareto"]["wins"]}
            for child in (c for c in candidates.values() if c["step"] == step + 1):
                assert set(child["parents"]) <= front, (step, child["id"])
                drawn += len(child["parents"])
    assert drawn >= 4  # the e and m requests after the first step drew parents


@pytest.mark.engine
@pytest.mark.timeout(2400)
def test_a_method_file_runs_resumes_and_is_compared(tmp_path, engine, sandbox):
    from coevolve.cli import main
    from coevolve.commands.compare import compare_and_report
    from coevolve.compare import CompareConfig

    toy = str(write_toy(tmp_path))
    # 96 tokens a proposal: what the comparison and the resume are checked for needs no valid program (at
    # TINY's 192 none of the toy's proposals was valid either)
    raw = {**TINY, "toy": {"width": 2}, "sampling": {"max_tokens": 96},
           "compare": {"methods": [toy, f"{toy}+esopt"], "tasks": ["tsp_construct"], "budgets": [4], "seeds": [0]},
           "test": {"sizes": [20], "limit": 8, "timeout_s": 120, "workers": 2},
           "es": {"population": 2, "proposals_per_member": 1, "sigma": 2e-3, "sigma_end": 1e-3, "alpha": 1e-3}}
    before = engine.checksum()
    root = compare_and_report(build_config(CompareConfig, json.loads(json.dumps(raw))), tmp_path / "cmp",
                              engine=engine, log=lambda line: None)
    assert engine.checksum() == before
    # the comparison's directory and each arm's keep the method file it ran (docs/search.md)
    copies = sorted(root.rglob("method_files/*.py"))
    assert len(copies) == 3 and all(c.read_text() == TOY for c in copies)
    assert (root / "method_files").is_dir()
    results = json.loads((root / "results.json").read_text())
    assert [(r["method"], r["finished"]) for r in results["rows"] if r["kind"] == "method"] == [
        (toy, 1), (f"{toy}+esopt", 1)]
    assert [(r["base"], r["variant"]) for r in results["rows"] if r["kind"] == "delta"] == [(toy, f"{toy}+esopt")]

    # the method file's arm (i1 x2, then m1 x2) is the uninterrupted run: its config, run again on the
    # session engine, stopped after its first step and resumed, gives the arm's summary
    arm = RunSpec("tsp_construct", toy, 4, 0).directory(root)
    full = read_summary(arm / "summary.json")
    assert full.evaluations == 4 and full.method == toy
    config = load_config(RunConfig, arm / "config.toml")
    same_run(stopped_then_resumed(tmp_path / "again", config, engine, sandbox), full)
    assert main(["report", str(root)]) == 0
    report = (root / "report.md").read_text()
    assert "| HillClimb |" in report and "| Δ HillClimb+ESOpt vs HillClimb |" in report
