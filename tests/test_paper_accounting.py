"""The reference's accounting and σ stepping as paper-mode settings, on the
loop with the fake engine: free parse re-asks ([accounting] parse_retries)
and a σ schedule to 0 stepped per EoH generation (es.sigma_steps)."""

from __future__ import annotations

import json

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.records import SearchSummary
from coevolve.codeparse import extract
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.loop import SearchLoop
from coevolve.search.runconfig import RunConfig
from search_fakes import TEMPLATE, FakeEngine, FakeEvaluator, FakeTask


def config(method: str, budget: int, **sections) -> RunConfig:
    raw = {"run": {"method": method, "task": "fake", "budget": budget, "seed": 0},
           "eoh": {"population": 4, "offspring": 3}, "sample": {"batch": 5, "population": 4},
           "es": {"population": 0, "sigma": 0.01, "sigma_end": 0.001, "alpha": 0.1}}
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return build_config(RunConfig, raw)


def run(directory, cfg: RunConfig) -> tuple[SearchSummary, FakeEngine]:
    store = RunStore.create(directory, dump_toml(as_dict(cfg)))
    engine = FakeEngine()
    return SearchLoop(cfg, store, engine, FakeEvaluator(), FakeTask()).run(), engine


@pytest.mark.parametrize("method", ["sample", "sample+esopt"])
def test_parse_retries_are_free_and_counted_apart(tmp_path, method):
    charged, _ = run(tmp_path / "ours", config(method, 20))
    free, engine = run(tmp_path / "ref", config(method, 20, accounting={"parse_retries": 4}))
    ledger = free.ledger
    assert charged.ledger.outcomes.get("parse", 0) > 0  # the fake's replies do fail to parse
    assert ledger.used == free.evaluations == 20  # T is spent exactly, retries or not
    assert ledger.parse_retries > 0 and charged.ledger.parse_retries == 0
    assert ledger.llm_requests == 20 + ledger.parse_retries == sum(engine.calls)
    assert ledger.outcomes.get("parse", 0) < charged.ledger.outcomes["parse"]
    # every re-asked reply held no code; a slot still unparsed spent all four re-asks
    steps = [e for e in read_jsonl(tmp_path / "ref" / "events.jsonl") if e["type"] == "step"]
    retried = [r for e in steps for r in e.get("parse_retries", [])]
    assert len(retried) == ledger.parse_retries
    assert all(extract(r["text"], "heuristic", TEMPLATE) is None for r in retried)
    assert ledger.outcomes.get("parse", 0) <= len(retried) // 4


def test_sigma_steps_per_generation_down_to_zero(tmp_path):
    """Three EoH generations (init 4, then e1 3, e2 3, m1 3, m2 3 each): two ES
    updates per generation share its σ, which follows the cosine from 0.01 to 0
    over the three generations (0.01, 0.005, 0); the last generation's members
    propose from the unperturbed weights."""
    cfg = config("eoh+esopt", 40, es={"sigma_end": 0.0, "sigma_steps": "generation"})
    summary, engine = run(tmp_path / "r", cfg)
    history = read_jsonl(tmp_path / "r" / "history.jsonl")
    assert [h["sigma"] for h in history] == pytest.approx([0.01, 0.01, 0.005, 0.005, 0.0, 0.0])
    assert engine.perturbed_calls == 4 * 3  # four perturbed steps of 3 members; σ = 0 members perturb nothing
    assert summary.es.updates == 6
    # ours: one step per update, ending at sigma_end
    per_update, _ = run(tmp_path / "u", config("eoh+esopt", 40))
    sigmas = [h["sigma"] for h in read_jsonl(tmp_path / "u" / "history.jsonl")]
    assert sigmas[0] == pytest.approx(0.01) and sigmas[-1] == pytest.approx(0.001) and len(set(sigmas)) == 6


def test_clone_retries_are_free_and_replace_clones(tmp_path):
    """The fake answers the same two programs (a crash, SCORE = 42) over and over: clones
    after their first. With clone_retries they are asked again free of T; every reply
    replaced was a clone of an earlier candidate, and fewer clones are charged."""
    scored, _ = run(tmp_path / "scored", config("sample", 30))
    free, engine = run(tmp_path / "free", config("sample", 30, accounting={"clone_retries": 2}))
    ledger = free.ledger
    assert ledger.used == free.evaluations == 30 and ledger.parse_retries == 0
    assert ledger.clone_retries > 0 and scored.ledger.clone_retries == 0
    assert ledger.llm_requests == 30 + ledger.clone_retries == sum(engine.calls)
    assert ledger.outcomes.get("duplicate", 0) < scored.ledger.outcomes["duplicate"]
    steps = [e for e in read_jsonl(tmp_path / "free" / "events.jsonl") if e["type"] == "step"]
    replaced = [r["text"] for e in steps for r in e.get("clone_retries", [])]
    assert len(replaced) == ledger.clone_retries and "parse_retries" not in steps[0]
    assert all("{same}" in t or "{crash}" in t for t in replaced)
    # killed after two steps: the resumed run reads the replaced replies back and asks only the rest again
    events = read_jsonl(tmp_path / "free" / "events.jsonl")
    cut = [i for i, e in enumerate(events) if e["type"] == "step"][1] + 1
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "config.toml").write_text((tmp_path / "free" / "config.toml").read_text())
    (killed / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:cut]))
    engine2 = FakeEngine()
    resumed = SearchLoop(config("sample", 30, accounting={"clone_retries": 2}), RunStore.open(killed), engine2,
                         FakeEvaluator(), FakeTask()).run()
    assert resumed.ledger == ledger
    assert sum(engine2.calls) == sum(engine.calls) - sum(len(e["requests"]) + len(e.get("clone_retries", []))
                                                         for e in steps[:2])
