"""Ledger, population, methods, prompts, reward levels and the run store."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pytest

from coevolve.base.config import build_config
from coevolve.engine.base import Completion
from coevolve.runstore import JsonlWriter, atomic_write_json, read_jsonl
from coevolve.search.ledger import BudgetExceeded, Ledger
from coevolve.search.methods import make_method, planned_es_generations
from coevolve.search.population import Candidate, Population
from coevolve.search.prompts import operator_messages
from coevolve.search.reward import candidate_reward, member_rewards
from coevolve.search.runconfig import RewardSection, RunConfig


def cand(id, objective=None, code="pass", failure=None, idea="x"):
    return Candidate(id=id, step=0, operator="i1", parents=[], model_state={"kind": "base"}, code=code,
                     idea=idea, objective=objective, failure=failure)


# ledger ----------------------------------------------------------------------------
def test_ledger_charges_every_outcome_and_stops_exactly_at_budget():
    ledger = Ledger(5)
    assert ledger.grant(20) == 5
    ids = [ledger.charge(o) for o in ["evaluated", "parse", "duplicate", "evaluated"]]
    assert ids == [1, 2, 3, 4]
    assert ledger.grant(3) == 1
    ledger.charge("evaluated")
    assert ledger.exhausted and ledger.grant(1) == 0
    with pytest.raises(BudgetExceeded):
        ledger.charge("evaluated")
    assert ledger.used == 5
    assert ledger.to_dict()["outcomes"] == {"duplicate": 1, "evaluated": 3, "parse": 1}


def test_ledger_counts_llm_requests_and_tokens_apart_from_budget():
    ledger = Ledger(3)
    ledger.record_llm([Completion("a", 10, 4), Completion("b", 12, 6)])
    assert (ledger.llm_requests, ledger.prompt_tokens, ledger.completion_tokens) == (2, 22, 10)
    assert ledger.used == 0
    with pytest.raises(ValueError, match="budget"):
        Ledger(0)


# population ----------------------------------------------------------------------------
def test_population_dedups_by_objective_and_keeps_the_best():
    pop = Population(size=3, direction="min")
    assert pop.add(cand(1, 5.0))
    assert not pop.add(cand(2, 5.0))  # same objective
    assert not pop.add(cand(3, None, failure="exception"))  # invalid never enters
    for i, v in [(4, 3.0), (5, 9.0), (6, 1.0)]:
        pop.add(cand(i, v))
    pop.survive()
    assert [c.id for c in pop.members] == [6, 4, 1]
    maxpop = Population(size=2, direction="max")
    for i, v in [(1, 1.0), (2, 3.0), (3, 2.0)]:
        maxpop.add(cand(i, v))
    maxpop.survive()
    assert [c.objective for c in maxpop.members] == [3.0, 2.0]


def test_prob_rank_selection_follows_rank_weights():
    pop = Population(size=4, direction="min")
    for i, v in enumerate([4.0, 1.0, 3.0, 2.0], start=1):
        pop.add(cand(i, v))
    rng = np.random.default_rng(0)
    counts = Counter(pop.select(1, rng)[0].objective for _ in range(8000))
    weights = np.array([1 / (r + 1 + 4) for r in range(4)])
    expected = weights / weights.sum()
    for rank, objective in enumerate([1.0, 2.0, 3.0, 4.0]):
        assert abs(counts[objective] / 8000 - expected[rank]) < 0.02
    two = pop.select(2, rng)
    assert len({c.id for c in two}) == 2  # without replacement
    assert len(pop.select(10, rng)) == 4


# methods ---------------------------------------------------------------------------------
def config(method, **sections):
    raw = {"run": {"method": method, "budget": 100}}
    raw.update(sections)
    return build_config(RunConfig, raw)


def test_method_plans():
    sample = make_method(config("sample", sample={"batch": 7}))
    assert [(s.operator, s.count, s.perturbed) for s in itertools.islice(sample.plan(), 2)] == [("i1", 7, False)] * 2
    ses = make_method(config("sample+esopt", es={"population": 4, "proposals_per_member": 2}))
    assert next(ses.plan()) == type(next(ses.plan()))("i1", 8, True, 1)
    eoh = make_method(config("eoh", eoh={"population": 5, "offspring": 3, "operators": ["e1", "m3"]}))
    assert [(s.operator, s.count, s.perturbed) for s in itertools.islice(eoh.plan(), 4)] == [
        ("i1", 5, False), ("e1", 3, False), ("m3", 3, False), ("e1", 3, False)]
    both = make_method(config("eoh+esopt", eoh={"population": 5, "offspring": 3}, es={"population": 4}))
    assert [(s.operator, s.count, s.perturbed) for s in itertools.islice(both.plan(), 5)] == [
        ("i1", 5, False), ("e1", 3, False), ("e2", 3, False), ("m1", 4, True), ("m2", 4, True)]


def test_planned_es_generations_counts_updates_within_budget():
    both = make_method(config("eoh+esopt", eoh={"population": 5, "offspring": 3}, es={"population": 4}))
    # 5 + (3 + 3 + 4 + 4) = 19; then 3 + 3 + 4 -> 29; a cut m2 of 1 member makes no update
    assert planned_es_generations(both, 19, 1) == 2
    assert planned_es_generations(both, 29, 1) == 3
    assert planned_es_generations(both, 30, 1) == 3
    assert planned_es_generations(both, 31, 1) == 4
    assert planned_es_generations(make_method(config("eoh")), 100, 1) == 0


def test_a_plan_warns_when_the_budget_leaves_out_what_the_method_name_promises():
    from coevolve.search.methods import format_plan, run_plan

    def warnings(method, budget, **sections):
        return run_plan(build_config(RunConfig, {"run": {"method": method, "budget": budget},
                                                 "eoh": {"population": 5, "offspring": 3}, **sections}))["warnings"]

    # eoh: 5 initial i1 (the template only), then e1 shows parents from evaluation 6 on
    assert warnings("eoh", 5) == ["every step in run.budget = 5 writes from the template alone: no candidate builds "
                                  "on another (the first step that does would need run.budget >= 6)"]
    assert warnings("eoh", 6) == [] and warnings("sample", 5) == []  # sampling is what sample promises
    # eoh+esopt: 5 + 3 + 3 before m1 (4 members), which needs two members to update
    assert warnings("eoh+esopt", 12, es={"population": 4}) == [
        "no ES update fits in run.budget = 12: eoh+esopt moves no weights here (the first needs run.budget >= 13)"]
    assert warnings("eoh+esopt", 13, es={"population": 4}) == []
    plan = run_plan(build_config(RunConfig, {"run": {"method": "sample+esopt", "budget": 1}}))
    assert ("  warning: no ES update fits in run.budget = 1: sample+esopt moves no weights here (the first needs "
            "run.budget >= 2)") in format_plan(plan)
    # the least budget, not the first whole generation's (40 under EoH's defaults: a generation cut short
    # by the budget still updates with fewer directions): 31 warns of 32, which plans an update
    def default_eoh_esopt(budget: int) -> dict:
        return run_plan(build_config(RunConfig, {"run": {"method": "eoh+esopt", "budget": budget}}))

    assert default_eoh_esopt(31)["warnings"] == ["no ES update fits in run.budget = 31: eoh+esopt moves no "
                                                 "weights here (the first needs run.budget >= 32)"]
    assert default_eoh_esopt(32)["es_updates"] == 1 and default_eoh_esopt(32)["warnings"] == []


def test_parents_per_operator():
    method = make_method(config("eoh", eoh={"parents": 3}))
    pop = Population(size=10, direction="min")
    for i in range(1, 6):
        pop.add(cand(i, float(i)))
    rng = np.random.default_rng(1)
    assert method.parents("i1", pop, rng) == []
    assert len(method.parents("e1", pop, rng)) == 3
    assert len(method.parents("e2", pop, rng)) == 3
    assert [len(method.parents(op, pop, rng)) for op in ("m1", "m2", "m3")] == [1, 1, 1]
    assert method.parents("m1", Population(size=3, direction="min"), rng) == []


# prompts -----------------------------------------------------------------------------------
def test_operator_prompts_carry_parents_and_answer_shape():
    parents = [cand(1, 6.5, code="def f(a):\n    return 1", idea="go near"),
               cand(2, 7.0, code="def f(a):\n    return 2", idea="go far")]
    texts = {}
    for op in ("i1", "e1", "e2", "m1", "m2", "m3"):
        ps = [] if op == "i1" else parents[:1] if op.startswith("m") else parents
        messages = operator_messages(op, "Solve TSP.", "def f(a):\n    return 0", "f", "min", ps)
        assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
        user = messages[1]["content"]
        assert "Solve TSP." in user and "```python" in user and "{your idea in one sentence}" in user
        texts[op] = user
    assert "return 0" in texts["i1"] and "go near" not in texts["i1"]
    assert "go near" in texts["e1"] and "go far" in texts["e1"] and "lower score is better" in texts["e1"]
    assert "go near" in texts["m1"] and "go far" not in texts["m1"]
    assert len(set(texts.values())) == 6
    assert all(len(t) < 1500 for t in texts.values())
    with pytest.raises(ValueError, match="needs at least one parent"):
        operator_messages("m1", "d", "t", "f", "min", [])
    with pytest.raises(ValueError, match="unknown operator"):
        operator_messages("x1", "d", "t", "f", "min", [])


# reward ------------------------------------------------------------------------------------------
def test_reward_levels_are_ordered_and_bounded():
    levels = RewardSection()
    unparseable = candidate_reward(cand(1, code=None, failure="parse"), 10.0, "min", levels)
    failing = candidate_reward(cand(2, failure="exception"), 10.0, "min", levels)
    much_worse = candidate_reward(cand(3, 1e9), 10.0, "min", levels)
    worse = candidate_reward(cand(4, 11.0), 10.0, "min", levels)
    same = candidate_reward(cand(5, 10.0), 10.0, "min", levels)
    better = candidate_reward(cand(6, 9.0), 10.0, "min", levels)
    best = candidate_reward(cand(7, 1.0), 10.0, "min", levels)
    assert unparseable < failing < much_worse < worse < same < better < best <= 1.0
    assert (unparseable, failing, same) == (-1.0, -0.6, 0.0)
    assert much_worse >= levels.worse_floor > failing
    # maximisation flips the sign of improvement
    assert candidate_reward(cand(8, 11.0), 10.0, "max", levels) > 0 > candidate_reward(cand(9, 9.0), 10.0, "max", levels)
    assert candidate_reward(cand(10, 3.0), None, "min", levels) == 0.0
    assert member_rewards([1.0, 0.0, -1.0, 0.5], [0, 0, 1, 1]) == {0: 0.5, 1: -0.25}


# run store ------------------------------------------------------------------------------------------
def test_jsonl_tolerates_a_torn_last_line_and_appends_after_it(tmp_path):
    path = tmp_path / "events.jsonl"
    with JsonlWriter(path) as log:
        log.append({"a": 1})
        log.append({"a": 2})
    with open(path, "a") as handle:
        handle.write('{"a": 3, "tor')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    with JsonlWriter(path) as log:
        log.append({"a": 4})
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}, {"a": 4}]
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(Exception, match="line 2 is not valid JSON"):
        read_jsonl(path)


def test_atomic_json_leaves_no_temp_files(tmp_path):
    atomic_write_json(tmp_path / "sub" / "s.json", {"b": 1, "a": [1.5]})
    assert json.loads((tmp_path / "sub" / "s.json").read_text()) == {"a": [1.5], "b": 1}
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["s.json"]
