"""Agents on the real engine: a short ES run on Sudoku and skill injection.
Kept small (few cases, short actions) for 2 CPU cores."""

import json

import pytest

from coevolve.agents.es_agent import run_agent
from coevolve.agents.runconfig import AgentRunConfig
from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.runstore import RunStore
from coevolve.agents.rollout import rollout
from coevolve.agents.skills import load_skill
from coevolve.engine.base import Sampling
from tasks.sudoku import Sudoku

pytestmark = pytest.mark.engine


def test_short_es_run_on_sudoku_records_rewards_and_updates(engine, tmp_path):
    raw = {"run": {"method": "esopt", "task": "sudoku", "budget": 16, "seed": 1},
           "task": {"masked": 1},  # at most 3 turns an episode
           "sampling": {"temperature": 1.0, "max_tokens": 10},
           "agent": {"population": 4, "batch": 2, "eval_cases": 2, "history_turns": 1,
                     "shaping": 0.5},  # the base model solves ~nothing: binary rewards alone would all be 0
           "es": {"sigma": 1e-2, "sigma_end": 5e-3, "alpha": 2e-3, "generations": 2}}
    config = build_config(AgentRunConfig, raw)
    store = RunStore.create(tmp_path, dump_toml(as_dict(config)))
    before = engine.checksum()
    try:
        summary = run_agent(config, store, engine, config.build_task())
    finally:
        records = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()] \
            if (tmp_path / "history.jsonl").exists() else []
        engine.reset()  # the session engine goes back to the checkpoint, bit-exactly
    assert engine.checksum() == before
    assert summary.rounds == 2 and summary.ledger.used == 16
    assert len(records) == 2
    from coevolve.agents.rollout import load_trajectories

    for index, record in enumerate(records):
        # each member's fitness recomputed from its saved episodes: mean of reward + 0.5 x progress,
        # so within [0, 1.5] (binary reward, progress in [0, 1])
        played = load_trajectories(tmp_path / "trajectories" / f"round_{index:03d}.jsonl")
        per_member: dict[int, list[float]] = {}
        for t in played:
            assert 0.0 <= t.metrics["progress"] <= 1.0 and t.reward in (0.0, 1.0)
            per_member.setdefault(int(t.label.rsplit(" ", 1)[1]), []).append(t.reward + 0.5 * t.metrics["progress"])
        assert sorted(per_member) == [0, 1, 2, 3] and all(len(v) == 2 for v in per_member.values())
        assert record["rewards"] == pytest.approx([sum(v) / 2 for _, v in sorted(per_member.items())])
        assert all(0.0 <= r <= 1.5 for r in record["rewards"])
        assert record["extra"]["episodes_used"] in (8, 16)
    # an update moves the weights exactly when the members' fitness differed
    checksums = [before] + [r["checksum"] for r in records]
    for record, previous, after in zip(records, checksums, checksums[1:]):
        assert (after != previous) == (len(set(record["rewards"])) > 1)
        assert (after != previous) == any(c != 0 for c in record["coefficients"])
    assert summary.checksum == records[-1]["checksum"]
    evals = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert [e["round"] for e in evals] == [0, 1, 2]
    markdown = (tmp_path / "trajectories" / "round_001.md").read_text()
    assert markdown.count("## Episode") == 8 and "round 1 member 3" in markdown
    actions = [line for line in markdown.splitlines() if line.startswith("**Action")]
    assert actions  # the model really acted


def test_injected_skill_changes_what_the_agent_sees(engine):
    task = Sudoku(masked=1)
    cases = task.cases("eval", 2, seed=0)
    skill = load_skill("skills/sudoku-basics")
    greedy = Sampling(temperature=0.0, max_tokens=8)

    class Recording:
        def __init__(self):
            self.prompt_tokens = []

        def chat(self, conversations, sampling, seeds=None):
            completions = engine.chat(conversations, sampling, seeds)
            self.prompt_tokens.append([c.prompt_tokens for c in completions])
            return completions

    plain, skilled = Recording(), Recording()
    without = rollout(plain, task, cases, greedy)
    with_skill = rollout(skilled, task, cases, greedy, skills=[skill])
    assert skill.body in with_skill[0].messages[0]["content"]
    assert skill.body not in without[0].messages[0]["content"]
    # the engine really received the longer prompt
    assert skilled.prompt_tokens[0][0] > plain.prompt_tokens[0][0] + 50


def test_the_agent_scaffolds_own_config_runs_on_the_real_engine(engine, tmp_path):
    """`coevolve new-task guess --agent`, its config.toml as written (one round here): ES and an online
    skill on the user's environment, every reply decoded under its action pattern."""
    import re

    from coevolve.agents.rollout import load_trajectories
    from coevolve.commands.new_task import scaffold
    from coevolve.commands.run import load_run_config

    folder = scaffold("guess", tmp_path, agent=True)
    config = load_run_config(folder / "config.toml", {"run": {"budget": 16}, "agent": {"eval_cases": 4}})
    assert config.run.method == "esopt+trace2skill" and config.run.task == f"{folder / 'env.py'}:Guess"
    task = config.build_task()
    store = RunStore.create(tmp_path / "run", dump_toml(as_dict(config)))
    try:
        summary = run_agent(config, store, engine, task)
    finally:
        engine.reset()
    assert summary.rounds == 1 and summary.ledger.used == 16
    played = load_trajectories(tmp_path / "run" / "trajectories" / "round_000.jsonl")
    assert len(played) == 16 and all(t.turns >= 1 for t in played)
    actions = [a for t in played for a in t.actions]
    assert actions and all(re.fullmatch(task.action_pattern, a.strip()) for a in actions), actions[:5]
    for t in played:  # the reward is the environment's: 1 exactly when the last answer says so
        assert (t.reward == 1.0) == t.observations[-1].startswith("Correct!")
    assert (tmp_path / "run" / "skills" / "guess-hints" / "SKILL.md").is_file()
    evals = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [e["round"] for e in evals] == [0, 1]


def test_the_teacher_replies_within_agent_teacher_max_tokens_on_the_real_engine(engine, tmp_path):
    """agent.teacher_max_tokens reaches the engine: a trace2skill round's analyses and merges are asked
    for at most that many tokens, and the engine's replies keep to it (the run still writes its skill)."""
    asked = []

    class Recording:
        def __getattr__(self, name):
            return getattr(engine, name)

        def chat(self, conversations, sampling, *args, **kwargs):
            replies = engine.chat(conversations, sampling, *args, **kwargs)
            if conversations[0][0]["content"].startswith(("You are an error analyst", "Merge these rules")):
                asked.extend((sampling.max_tokens, reply.completion_tokens) for reply in replies)
            return replies

    raw = {"run": {"method": "trace2skill", "task": "sudoku", "budget": 4, "seed": 2}, "task": {"masked": 1},
           "sampling": {"max_tokens": 8},  # the rollouts only need failures for the analysts to read
           "agent": {"population": 2, "batch": 2, "eval_cases": 1, "distill": "online", "skill_every": 1,
                     "skill_successes": 0, "teacher_max_tokens": 24}}
    config = build_config(AgentRunConfig, raw)
    store = RunStore.create(tmp_path, dump_toml(as_dict(config)))
    summary = run_agent(config, store, Recording(), config.build_task())
    assert asked and {limit for limit, _ in asked} == {24}
    assert all(0 < tokens <= 24 for _, tokens in asked), asked
    assert any(tokens == 24 for _, tokens in asked), asked  # the limit cut a reply: it, not the model, ended it
    assert summary.skill and (tmp_path / "skills" / "distilled" / "SKILL.md").exists()
