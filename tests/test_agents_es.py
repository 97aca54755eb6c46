"""ES, Trace2Skill and their co-evolution on agent tasks, with a fake engine
(real ESOpt, ledger, rollouts, files) so the control flow is checked fast."""

import json
from contextlib import contextmanager

import pytest

from coevolve.agents.es_agent import AgentRunConfig, run_agent
from coevolve.engine.base import Completion
from coevolve.es import ESConfig
from tasks.sudoku import Sudoku


class FakeEngine:
    """Solves a sudoku move when its perturbation seed is even, else fumbles:
    members get different fitness, so ES has a direction to follow."""

    def __init__(self):
        self.perturbation = None
        self.updates = []
        self.system_prompts = []
        self.device = "fake"

    @contextmanager
    def perturbed(self, seed, sigma):
        assert self.perturbation is None
        self.perturbation = (seed, sigma)
        try:
            yield
        finally:
            self.perturbation = None

    def apply_update(self, seeds, coefficients, alpha):
        assert self.perturbation is None
        self.updates.append((list(seeds), list(coefficients), alpha))

    def checksum(self):
        return f"fake-{len(self.updates)}"

    def chat(self, conversations, sampling, seeds=None):
        out = []
        for conversation in conversations:
            self.system_prompts.append(conversation[0]["content"])
            if conversation[0]["content"].startswith(("You are an error analyst", "You are a success analyst")):
                out.append(Completion(text="ADD Checks: Check the row, the column and the box first."))
            elif conversation[0]["content"].startswith("Merge these rules"):
                out.append(Completion(text="- Check the row, the column and the box first."))
                continue
            good = self.perturbation is None or self.perturbation[0] % 2 == 0
            rows = [line.split("|")[1].split() for line in conversation[-1]["content"].splitlines() if "|" in line]
            empty = [(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if v == "."]
            if good and empty:
                r, c = empty[0]
                used = {rows[r][k] for k in range(4)} | {rows[k][c] for k in range(4)}
                for rr in range(r - r % 2, r - r % 2 + 2):
                    used |= {rows[rr][cc] for cc in range(c - c % 2, c - c % 2 + 2)}
                value = next(v for v in "1234" if v not in used)
                out.append(Completion(text=f"set {r + 1} {c + 1} {value}"))
            else:
                out.append(Completion(text="hmm"))
        return out


def es_config(**kw):
    return ESConfig(**{"population": 4, "sigma": 1e-3, "alpha": 1e-3, "generations": 10, "seed": 3, **kw})


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_esopt_spends_the_budget_in_whole_generations(tmp_path):
    engine = FakeEngine()
    cfg = AgentRunConfig(method="esopt", budget_episodes=26, population=4, batch=3, eval_cases=2, eval_every=2)
    summary = run_agent(engine, Sudoku(masked=2), cfg, tmp_path, es_config=es_config())
    assert summary["rounds"] == 2 and summary["ledger"]["used"] == 24  # a third round (36) does not fit
    history = read_jsonl(tmp_path / "history.jsonl")
    assert [h["generation"] for h in history] == [0, 1] and len(engine.updates) == 2
    for record, (seeds, _, _) in zip(history, engine.updates):
        assert record["seeds"] == seeds
        # even seeds solve (reward 1), odd seeds fumble (reward 0)
        assert record["rewards"] == [1.0 if s % 2 == 0 else 0.0 for s in seeds]
    assert [e["round"] for e in read_jsonl(tmp_path / "eval.jsonl")] == [0, 2]
    assert (tmp_path / "trajectories" / "round_000.md").exists()
    assert len(read_jsonl(tmp_path / "trajectories" / "round_001.jsonl")) == 12
    assert json.loads((tmp_path / "summary.json").read_text())["checksum"] == "fake-2"
    with pytest.raises(ValueError, match="already holds a run"):
        run_agent(engine, Sudoku(masked=2), cfg, tmp_path, es_config=es_config())
    assert len(read_jsonl(tmp_path / "history.jsonl")) == 2  # the earlier run is untouched


def test_esopt_stops_when_the_sigma_schedule_ends(tmp_path):
    cfg = AgentRunConfig(method="esopt", budget_episodes=100, population=4, batch=2, eval_cases=1)
    summary = run_agent(FakeEngine(), Sudoku(masked=2), cfg, tmp_path, es_config=es_config(generations=3))
    assert summary["rounds"] == 3 and summary["ledger"]["used"] == 24


def test_trace2skill_only_distils_and_injects_without_touching_weights(tmp_path):
    engine = FakeEngine()
    cfg = AgentRunConfig(method="trace2skill", budget_episodes=16, population=4, batch=2, eval_cases=1,
                         skill_name="sudoku-learned")
    summary = run_agent(engine, Sudoku(masked=2), cfg, tmp_path)
    assert engine.updates == [] and summary["rounds"] == 2 and summary["ledger"]["used"] == 16
    assert summary["skill"].endswith("sudoku-learned")
    assert "Check the row, the column and the box first." in (tmp_path / "skills" / "sudoku-learned" / "SKILL.md").read_text()
    evals = read_jsonl(tmp_path / "eval.jsonl")
    assert evals[0]["skills"] == [] and evals[-1]["skills"] == ["sudoku-learned"]
    assert any("Skill: sudoku-learned" in p for p in engine.system_prompts)


def test_coevolution_alternates_es_generations_and_skill_updates(tmp_path):
    engine = FakeEngine()
    cfg = AgentRunConfig(method="esopt+trace2skill", budget_episodes=32, population=4, batch=2, eval_cases=1,
                         skill_every=2)
    run_agent(engine, Sudoku(masked=2), cfg, tmp_path, es_config=es_config())
    history = read_jsonl(tmp_path / "history.jsonl")
    # the skill appears after generation 1 (skill_every=2) and is used from generation 2 on
    assert [h["extra"]["skills"] for h in history] == [[], [], ["distilled"], ["distilled"]]
    assert len(engine.updates) == 4


def test_shaping_adds_the_progress_metric_to_the_fitness(tmp_path):
    cfg = AgentRunConfig(method="esopt", budget_episodes=8, population=4, batch=2, eval_cases=1, shaping=0.5)
    run_agent(FakeEngine(), Sudoku(masked=2), cfg, tmp_path, es_config=es_config())
    record = read_jsonl(tmp_path / "history.jsonl")[0]
    # solvers: reward 1 + 0.5 * progress 1; fumblers: every reply unparsed, no right cell
    assert record["rewards"] == [1.5 if s % 2 == 0 else 0.0 for s in record["seeds"]]


def test_bad_configs_are_rejected_clearly(tmp_path):
    with pytest.raises(ValueError, match="method must be one of"):
        AgentRunConfig(method="magic")
    with pytest.raises(ValueError, match="shaping"):
        AgentRunConfig(shaping=-1)
    with pytest.raises(ValueError, match="smaller than one round"):
        AgentRunConfig(budget_episodes=10, population=4, batch=3)
    with pytest.raises(ValueError, match="needs es_config"):
        run_agent(FakeEngine(), Sudoku(), AgentRunConfig(budget_episodes=64), tmp_path)
    with pytest.raises(ValueError, match="differs from population"):
        run_agent(FakeEngine(), Sudoku(), AgentRunConfig(budget_episodes=64), tmp_path, es_config=es_config(population=6))
