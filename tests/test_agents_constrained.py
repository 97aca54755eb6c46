"""Constrained actions and the held-out protocol on the real engine (shared
session engine; small: a handful of problems, few tokens)."""

from __future__ import annotations

import json
import re

import pytest

from coevolve.agents.evaluate import eval_sampling, evaluate_arm
from coevolve.agents.rollout import rollout
from coevolve.engine.base import ConstraintError
from tasks.sudoku import Sudoku

pytestmark = pytest.mark.engine


def test_constrained_sudoku_turns_are_always_well_formed(engine):
    task = Sudoku(masked=2)
    cases = task.cases("eval", 6, seed=0)
    sampling = eval_sampling(12)
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (1.0, 1.0, 40)  # PAPER_EVAL, no task given
    trajectories = rollout(engine, task, cases, sampling, seed=3, constrained=True)
    actions = [a for t in trajectories for a in t.actions]
    assert actions and all(re.fullmatch(task.action_pattern, a) for a in actions), actions
    assert all(t.metrics["well_formed"] == 1.0 for t in trajectories)
    # same seeds, same constraint: the same replies
    again = rollout(engine, task, cases, sampling, seed=3, constrained=True)
    assert [t.actions for t in again] == [t.actions for t in trajectories]


def test_constrained_math_turns_are_a_tool_block_or_a_boxed_answer(engine):
    from tasks.react_math import ReactMath, extract_boxed, extract_code
    from coevolve.sandbox.results import ToolResult

    task = ReactMath(tool=lambda code: ToolResult("1\n", "", None), turns=2)
    trajectories = rollout(engine, task, task.cases("eval", 4, seed=0), eval_sampling(48), seed=1, constrained=True)
    for t in trajectories:
        for action in t.actions:
            assert action.startswith(("```python\n", "\\boxed{")), action
            assert extract_code(action) is not None or extract_boxed(action) is not None, action
    assert all(t.metrics["well_formed"] == 1.0 for t in trajectories)


def test_a_pattern_the_engine_rejects_fails_before_any_episode(engine):
    with pytest.raises(ConstraintError) as caught:
        engine.check_constraints(["set (1-4"])
    message = str(caught.value)  # one line: the grammar error's first line and its reason, then what to do
    assert "\n" not in message and message.startswith("the engine rejects the action pattern 'set (1-4': "), message
    assert "unclosed group; write the pattern without it, or decode freely: agent.constrained = false" in message
    engine.check_constraints([Sudoku(masked=1).action_pattern])  # a good one passes


def test_the_patterns_check_task_says_the_engine_cannot_decode_under_are_those_it_refuses(engine):
    """tasks.regex_moves.undecodable, behind check-task's warning, against the engine's grammar backend."""
    from tasks.regex_moves import undecodable

    patterns = [r"guess [1-9][0-9]{0,2}", r"^move (up|down)$", r"(?i)set [1-4]", r"a*+b", r"\Ago\Z", r"(?s).{1,4}",
                r"(a|b)c\1", r"(?P<n>a)(?P=n)", r"x(?=y)y", r"(?<!a)b", r"\bgo\b", r"a\Bb", r"(a)?(?(1)b|c)",
                r"(?>ab)c"]
    refused = []
    for pattern in patterns:
        try:
            engine.check_constraints([pattern])
        except ConstraintError:
            refused.append(pattern)
    assert refused == [p for p in patterns if undecodable(p)] and len(refused) == 8


def test_eval_command_reports_mean_and_pass_at_k_with_intervals(engine, tmp_path, monkeypatch, capsys):
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.agents.skills import write_skill
    from coevolve.cli import main

    class Shared:  # the session engine, which the command must not close
        def __new__(cls, *args, **kwargs):
            return engine

    monkeypatch.setattr(vllm_engine, "Engine", Shared)
    monkeypatch.setattr(engine, "close", lambda: None)
    skill = write_skill(tmp_path / "sudoku-rules", "Rules", "# r\n\n## Moves\n- Fill the only empty cell.")
    out = tmp_path / "eval.json"
    assert main(["eval", "--task", "sudoku", "--option", "masked=1", "--problems", "3", "--k", "2",
                 "--skill", str(skill.path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| base |" in printed and "| skill |" in printed and "Mean@2 [95% CI]" in printed
    result = json.loads(out.read_text())
    assert result["constrained"] is True and [r["arm"] for r in result["results"]] == ["base", "skill"]
    for arm in result["results"]:
        interval = arm["mean@2"]
        assert interval["n"] == 3 and 0 <= interval["low"] <= interval["mean"] <= interval["high"] <= 1
        assert arm["well_formed"] == 1.0
    # the skill against the base weights, paired per problem: the mean change is the Mean@2 difference, and
    # three problems can never be told apart by the sign test (3 of 3 one way: p = 0.25)
    line = re.search(r"skill vs base: ([+-]\d\.\d{3}): (\d) of 3 problems better, (\d) worse; cannot be told "
                     r"apart \(sign test p = [\d.]+\)", printed)
    assert line, printed
    base, skilled = (r["mean@2"]["mean"] for r in result["results"])
    assert float(line.group(1)) == pytest.approx(skilled - base, abs=5e-4)
    assert int(line.group(2)) + int(line.group(3)) <= 3


def test_evaluate_arm_uses_k_attempts_per_problem(engine):
    task = Sudoku(masked=1)
    heldout = task.cases("eval", 2, seed=1)
    result = evaluate_arm(engine, task, heldout, "base", k=3, sampling=eval_sampling(12), seed=0,
                          constrained=True)
    assert len(result.trajectories) == 6 and result.problems == 2 and result.mean_at_k.n == 2
    assert {t.case_id for t in result.trajectories[:2]} == {c.id for c in heldout}
