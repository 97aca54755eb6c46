"""Trace2Skill against a real OpenAI-compatible server started on loopback."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest_server import no_engine_env

from coevolve.agents.rollout import rollout, save_trajectories
from coevolve.agents.skills import load_skill
from coevolve.engine.base import Sampling
from tasks.sudoku import Sudoku

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.server
# the lead's OpenAI-compatible client; until it lands this module skips
# instead of starting a server it cannot talk to
pytest.importorskip("coevolve.engine.openai_client")


def test_distill_with_a_served_teacher_writes_a_valid_skill(openai_server, tmp_path, monkeypatch):
    from coevolve.engine.openai_client import OpenAIGenerator

    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    served = OpenAIGenerator(openai_server.base_url, openai_server.model, concurrency=4)
    task = Sudoku(masked=1)
    trajectories = rollout(served, task, task.cases("train", 3, seed=0), Sampling(temperature=0.7, max_tokens=10),
                           history_turns=1)
    assert all(t.turns >= 1 for t in trajectories)
    run_dir = tmp_path / "run"
    save_trajectories(trajectories, run_dir / "trajectories" / "round_000", "served rollouts")

    out = tmp_path / "skills" / "served-sudoku"
    result = subprocess.run(
        [sys.executable, "-m", "coevolve.cli", "distill", str(run_dir), "--out", str(out),
         "--endpoint-base-url", openai_server.base_url, "--endpoint-model", openai_server.model, "--successes", "1"],
        # as the base install runs it: nothing of vLLM or torch importable
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=no_engine_env(tmp_path, OPENAI_API_KEY="EMPTY"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "wrote" in result.stdout
    skill = load_skill(out)
    assert skill.name == "served-sudoku"
    assert len((out / "SKILL.md").read_text().splitlines()) <= 80

    # the distilled skill reaches the agent's system prompt
    with_skill = rollout(served, task, task.cases("eval", 1, seed=0), Sampling(max_tokens=8), skills=[skill])
    assert skill.body in with_skill[0].messages[0]["content"]
    assert with_skill[0].messages[0]["content"] != trajectories[0].messages[0]["content"]


def test_served_constrained_actions_are_well_formed(openai_server, monkeypatch):
    """The OpenAI client sends the action pattern as vLLM's structured_outputs field."""
    import re

    from coevolve.base.sampling import PAPER_EVAL
    from coevolve.engine.openai_client import OpenAIGenerator

    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    served = OpenAIGenerator(openai_server.base_url, openai_server.model, concurrency=4)
    task = Sudoku(masked=2)
    sampling = Sampling(temperature=PAPER_EVAL.temperature, top_k=PAPER_EVAL.top_k, max_tokens=12)
    trajectories = rollout(served, task, task.cases("eval", 3, seed=0), sampling, seed=2, constrained=True)
    actions = [a for t in trajectories for a in t.actions]
    assert actions and all(re.fullmatch(task.action_pattern, a) for a in actions), actions
