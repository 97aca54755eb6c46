"""The loop with a fake engine and evaluator: budget accounting, run directory,
determinism, ES updates, and resume after a kill at any point."""

from __future__ import annotations

import json
import random
import tomllib

import networkx as nx
import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.es.start import ResumeError
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.loop import SearchLoop
from coevolve.search.methods import make_method, planned_es_generations
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask

METHODS = ["sample", "eoh", "sample+esopt", "eoh+esopt"]


def make_config(method: str, budget: int, seed: int = 0, seed_template: bool = False) -> RunConfig:
    return build_config(RunConfig, {
        "run": {"method": method, "task": "fake", "budget": budget, "seed": seed},
        "eoh": {"population": 4, "offspring": 3},
        "sample": {"batch": 5, "population": 4},
        "es": {"population": 4, "sigma": 0.01, "sigma_end": 0.001, "alpha": 0.1},
        "context": {"seed_template": seed_template, "fingerprint": True},
    })


def run(directory, config: RunConfig, engine: FakeEngine | None = None, resume: bool = False):
    store = RunStore.open(directory) if resume else RunStore.create(directory, dump_toml(as_dict(config)))
    engine = engine or FakeEngine()
    evaluator = FakeEvaluator()
    summary = SearchLoop(config, store, engine, evaluator, FakeTask()).run()
    return summary, engine, evaluator


@pytest.mark.parametrize("method", METHODS)
def test_each_method_spends_exactly_its_budget(tmp_path, method):
    config = make_config(method, budget=23, seed_template=True)
    summary, engine, evaluator = run(tmp_path / "r", config)
    d = tmp_path / "r"
    assert summary.evaluations == 23 == sum(summary.ledger.outcomes.values())
    candidates = read_jsonl(d / "candidates.jsonl")
    assert [c["id"] for c in candidates] == list(range(1, 24))
    outcomes = summary.ledger.outcomes
    assert outcomes.get("parse", 0) == sum(c["failure"] == "parse" for c in candidates) > 0
    # clones (rename-invariant fingerprints, on here) are rejected before the sandbox
    assert outcomes.get("rejected", 0) == sum(c["duplicate_of"] is not None for c in candidates) > 0
    assert all(c["failure"] == "duplicate" and c["objective"] is None for c in candidates if c["duplicate_of"])
    # duplicates and parse failures never reach the sandbox; the seeded template is scored once, uncharged
    assert summary.ledger.seeded == 1 and summary.context["seed"] == {"id": 0, "objective": 50.0, "failure": None}
    assert evaluator.evaluated == outcomes["evaluated"] + 1
    assert summary.ledger.llm_requests == 23 == sum(engine.calls)
    assert summary.valid == sum(c["objective"] is not None for c in candidates)

    for name in ["config.toml", "events.jsonl", "genealogy.json", "best.py", "summary.json", "progress.png"]:
        assert (d / name).stat().st_size > 0, name
    events = read_jsonl(d / "events.jsonl")
    assert events[0]["type"] == "start" and events[-1]["type"] == "end"
    steps = [e for e in events if e["type"] == "step"]
    assert sorted(p.name for p in (d / "population").iterdir()) == [f"gen_{i:04d}.json" for i in range(len(steps))]
    graph = nx.node_link_graph(json.loads((d / "genealogy.json").read_text()), edges="links")
    assert graph.number_of_nodes() == 23 + 1  # and the seeded template, candidate 0
    assert all(graph.has_edge(p, c["id"]) for c in candidates for p in c["parents"])
    best = summary.best
    assert best.objective == min(c["objective"] for c in candidates if c["objective"] is not None)
    assert f"SCORE = {best.objective}" in (d / "best.py").read_text()
    assert summary.train.reference == 5.0 and best.gap == pytest.approx((best.objective - 5) / 5)

    if method.endswith("+esopt"):
        history = read_jsonl(d / "history.jsonl")
        planned = planned_es_generations(make_method(config), 23, 1)
        assert len(history) == summary.es.updates == planned >= 2
        assert summary.es.checksum != FakeEngine().checksum()
        assert engine.perturbed_calls == sum(len(e["es"]["members"]) for e in steps if e["es"])
        perturbed = [c for c in candidates if c["model_state"]["kind"] == "perturbed"]
        assert perturbed and all(c["reward"] is not None for c in perturbed)
    else:
        assert not (d / "history.jsonl").exists()
        assert engine.perturbed_calls == 0 and summary.es is None
    if method.startswith("eoh"):
        assert {c["operator"] for c in candidates} >= {"i1", "e1", "e2", "m1"}


def test_same_seed_same_summary_other_seed_differs(tmp_path):
    a, *_ = run(tmp_path / "a", make_config("eoh+esopt", 30, seed=1))
    b, *_ = run(tmp_path / "b", make_config("eoh+esopt", 30, seed=1))
    c, *_ = run(tmp_path / "c", make_config("eoh+esopt", 30, seed=2))
    assert a == b
    assert a.best_so_far != c.best_so_far


@pytest.mark.parametrize("method", ["eoh+esopt", "sample+esopt", "eoh", "eoh+esopt+trace2skill"])
def test_resume_after_a_kill_at_any_step_matches_an_uninterrupted_run(tmp_path, method):
    config = make_config(method, 31, seed=3)
    full, full_engine, _ = run(tmp_path / "full", config)
    full_events = read_jsonl(tmp_path / "full" / "events.jsonl")
    full_history = read_jsonl(tmp_path / "full" / "history.jsonl")
    steps = [e for e in full_events if e["type"] == "step"]
    first = full_events.index(steps[0])  # after the start and the seeded template's events
    rng = random.Random(0)
    for kept in range(len(steps) + 1):
        # killed after `kept` step events; for an ES step, maybe before its update reached history.jsonl
        lost_update = kept > 0 and steps[kept - 1]["es"] is not None and rng.random() < 0.5
        generations = sum(1 for e in steps[:kept] if e["es"]) - int(lost_update)
        d = tmp_path / f"k{kept}"
        d.mkdir()
        (d / "config.toml").write_text((tmp_path / "full" / "config.toml").read_text())
        with open(d / "events.jsonl", "w") as handle:
            for event in full_events[:first + kept]:
                handle.write(json.dumps(event) + "\n")
            handle.write(json.dumps(full_events[first + kept])[: rng.randrange(1, 40)])  # torn line
        if "+esopt" in method:
            with open(d / "history.jsonl", "w") as handle:
                for record in full_history[:generations]:
                    handle.write(json.dumps(record) + "\n")
        resumed, engine, evaluator = run(d, config, resume=True)
        assert resumed == full, f"kill after {kept} steps"
        live = steps[kept:]
        assert evaluator.evaluated == sum(1 for e in live for r in e["results"] if "objective" in r and r["failure"] not in ("parse", "duplicate"))
        assert read_jsonl(d / "candidates.jsonl") == read_jsonl(tmp_path / "full" / "candidates.jsonl")
        if "+esopt" in method:
            strip = lambda rs: [{k: r[k] for k in ("generation", "seeds", "coefficients", "checksum")} for r in rs]
            assert strip(read_jsonl(d / "history.jsonl")) == strip(full_history)
            assert engine.checksum() == full_engine.checksum()
        events = read_jsonl(d / "events.jsonl")
        assert [e for e in events if e["type"] == "step"] == steps  # nothing logged twice


def test_resume_refuses_a_log_from_another_config(tmp_path):
    run(tmp_path / "r", make_config("eoh", 12))
    other = make_config("eoh", 12, seed=9)
    with pytest.raises(ResumeError, match=r"run.seed was 0, is now 9; .*put back run.seed = 0$"):
        SearchLoop(other, RunStore.open(tmp_path / "r"), FakeEngine(), FakeEvaluator(), FakeTask()).run()


def test_endpoint_serves_base_requests_and_the_engine_perturbed_ones(tmp_path):
    config = make_config("eoh+esopt", 20)
    config.endpoint.base_url, config.endpoint.model = "http://127.0.0.1:1/v1", "endpoint-model"
    store = RunStore.create(tmp_path / "r", dump_toml(as_dict(config)))
    engine, endpoint = FakeEngine(), FakeEngine()
    SearchLoop(config, store, engine, FakeEvaluator(), FakeTask(), endpoint=endpoint).run()
    candidates = read_jsonl(store.candidates_path)
    kinds = [c["model_state"]["kind"] for c in candidates]
    assert sum(endpoint.calls) == kinds.count("endpoint") > 0
    assert sum(engine.calls) == kinds.count("perturbed") > 0
    assert {c["model_state"].get("model") for c in candidates if c["model_state"]["kind"] == "endpoint"} == {"endpoint-model"}


@pytest.mark.parametrize("method", ["sample+esopt", "eoh+esopt"])
def test_paper_reward_is_what_the_loop_feeds_es(tmp_path, method):
    """reward.kind = "paper" wired through the loop: each update's rewards are the
    reference formulas applied to that step's candidates, recomputed here from
    candidates.jsonl and the population snapshots."""
    from coevolve.search.reward import paper_eoh_rewards, paper_sample_rewards

    raw = {"run": {"method": method, "task": "fake", "budget": 40, "seed": 3},
           "eoh": {"population": 4, "offspring": 4, "init_in_budget": False},
           "sample": {"batch": 5, "population": 4},
           "es": {"sigma": 0.01, "sigma_end": 0.001, "alpha": 0.1, "ddof": 0}, "reward": {"kind": "paper"}}
    config = build_config(RunConfig, raw)
    summary, engine, _ = run(tmp_path / "r", config)
    assert summary.evaluations == 40 + (4 if method == "eoh+esopt" else 0) and summary.outside_budget in (0, 4)
    d = tmp_path / "r"
    candidates = {c["id"]: c for c in read_jsonl(d / "candidates.jsonl")}
    history = read_jsonl(d / "history.jsonl")
    assert history and all(len(h["rewards"]) in (4, 5) for h in history)  # directions follow the plan
    for record in history:
        step = record["extra"]["step"]
        mine = [c for c in candidates.values() if c["step"] == step]
        objectives = [c["objective"] for c in mine]
        if method == "sample+esopt":
            expected = paper_sample_rewards(objectives, "min")
        else:
            before = json.loads((d / "population" / f"gen_{step - 1:04d}.json").read_text())["population"]
            best_parent = [min(candidates[p]["objective"] for p in c["parents"]) for c in mine]
            expected = paper_eoh_rewards(objectives, best_parent, [m["objective"] for m in before], "min")
        assert record["rewards"] == pytest.approx(expected)
        assert [c["reward"] for c in mine] == pytest.approx(expected)


def test_a_run_started_before_a_setting_existed_still_resumes(tmp_path):
    """Settings added since a run began are missing from its log; their defaults keep
    the old behaviour, so the run resumes. A changed value is still refused."""
    config = make_config("eoh", budget=12)
    first, _, _ = run(tmp_path / "r", config)
    events_path = tmp_path / "r" / "events.jsonl"
    events = read_jsonl(events_path)
    del events[0]["config"]["eoh"]["m_multiplier"], events[0]["config"]["reward"]["kind"]
    events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    again, _, _ = run(tmp_path / "r", config, resume=True)
    assert again == first
    events[0]["config"]["eoh"]["offspring"] = 99
    events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    with pytest.raises(ResumeError, match="eoh.offspring was 99, is now 3"):
        run(tmp_path / "r", config, resume=True)


def test_a_run_written_before_proposer_became_endpoint_still_resumes(tmp_path):
    """Runs before the rename hold [proposer] in config.toml and in their start
    event; resuming reads both as [endpoint] and serves the logged steps."""
    config = make_config("eoh+esopt", 12)
    finished, _, _ = run(tmp_path / "r", config)
    store = RunStore.open(tmp_path / "r")
    events, toml = store.events_path.read_text(), store.config_path.read_text()
    assert '"endpoint":' in events.splitlines()[0] and "[endpoint]" in toml
    store.events_path.write_text(events.replace('"endpoint":', '"proposer":', 1))
    store.config_path.write_text(toml.replace("[endpoint]", "[proposer]"))
    with pytest.warns(FutureWarning, match=r"\[proposer\] is deprecated"):
        old = build_config(RunConfig, tomllib.loads(store.config_path.read_text()))
    resumed, engine, evaluator = run(tmp_path / "r", old, resume=True)
    assert resumed == finished and sum(engine.calls) == 0 and evaluator.evaluated == 0  # all served from the log


def test_an_idea_that_echoes_the_prompts_answer_format_is_left_out_of_best_py(tmp_path):
    """The embedded model sends the answer format back inside the braces; that is no idea: the candidates
    hold none and best.py's header says so, where it showed the prompt's own words."""
    import dataclasses
    import re

    echo = "{your idea in one sentence, then the complete function heuristic in one ```python block}"

    class EchoingEngine(FakeEngine):
        def chat(self, conversations, sampling, seeds=None, constraints=None):
            return [dataclasses.replace(c, text=re.sub(r"^\{idea \d+\}", echo, c.text))
                    for c in super().chat(conversations, sampling, seeds, constraints)]

    summary, _, _ = run(tmp_path / "r", make_config("sample", budget=10), EchoingEngine())
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    assert summary.best is not None and summary.best.idea == ""
    assert not any("in one sentence" in (c["idea"] or "") for c in candidates)
    assert "\n# idea: -\n" in (tmp_path / "r" / "best.py").read_text()
