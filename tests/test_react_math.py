import json
import os
from pathlib import Path

import pytest

from coevolve.sandbox.results import FailureKind, ToolResult
from tasks.base import AgentTask
from tasks.react_math import ReactMath, answers_match, extract_boxed, extract_code, load_problems
from tasks.registry import get_task


class RecordingTool:
    """Stands in for the sandbox: runs nothing, returns canned output."""

    def __init__(self, result: ToolResult):
        self.result = result
        self.calls: list[str] = []

    def __call__(self, code: str) -> ToolResult:
        self.calls.append(code)
        return self.result


def test_registered_and_follows_the_agent_protocol():
    assert isinstance(get_task("react_math"), AgentTask)


def test_generated_problems_are_deterministic_with_integer_answers():
    task = ReactMath(tool=RecordingTool(ToolResult("", "", None)))
    cases = task.cases("train", 30, seed=0)
    assert cases == task.cases("train", 30, seed=0)
    assert [c.question for c in cases] != [c.question for c in task.cases("eval", 30, seed=0)]
    assert len({c.question.split()[0:3][0] for c in cases}) > 2  # several problem kinds
    for case in cases:
        int(case.answer)


def test_generated_answers_are_right():
    # recompute every generated answer by evaluating the question's numbers independently
    task = ReactMath(tool=RecordingTool(ToolResult("", "", None)))
    for case in task.cases("eval", 60, seed=5):
        q, a = case.question, int(case.answer)
        if q.startswith("What is") and "%" not in q:
            assert eval(q[len("What is "):].rstrip("?")) == a
        elif q.startswith("Solve for x"):
            lhs, rhs = q.split(": ")[1].split(". What")[0].split(" = ")
            assert eval(lhs.replace("x", f"*({a})")) == int(rhs)
        elif "%" in q:
            p, base = q[len("What is "):].rstrip("?").split("% of ")
            assert int(p) * int(base) / 100 == a


@pytest.mark.parametrize(
    "text,boxed",
    [("so \\boxed{42}.", "42"), ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"), ("no box", None),
     ("\\boxed{unclosed", None)],
)
def test_boxed_extraction(text, boxed):
    assert extract_boxed(text) == boxed


def test_code_extraction_handles_unclosed_fences():
    assert extract_code("Let me compute.\n```python\nprint(2+3)\n```\nthen") == "print(2+3)"
    assert extract_code("```\nprint(1)\n") == "print(1)"
    assert extract_code("just words") is None


@pytest.mark.parametrize(
    "given,expected,same",
    [("42", "42", True), ("42.0", "42", True), ("$1,200", "1200", True), ("x = -3", "-3", True),
     ("0.5", "1/2", True), ("41", "42", False), ("seven", "7", False), ("\\text{ 12 }", "12", True)],
)
def test_exact_match_normalises_formatting_only(given, expected, same):
    assert answers_match(given, expected) is same


def test_tool_call_then_correct_answer_earns_reward_one():
    tool = RecordingTool(ToolResult("377\n", "", None))
    task = ReactMath(tool=tool, turns=3)
    case = task.cases("train", 1, seed=1)[0]
    state, observation = task.reset(case)
    assert case.question in observation
    observation, done = task.step(state, "I compute:\n```python\nprint(29*13)\n```")
    assert tool.calls == ["print(29*13)"] and observation == "Python output:\n377" and not done
    observation, done = task.step(state, f"The answer is \\boxed{{{case.answer}}}")
    assert done and task.reward(state) == 1.0
    assert task.metrics(state) == {"solved": 1.0, "well_formed": 1.0, "progress": 1.0, "turns": 2.0, "answered": 1.0, "tool_calls": 1.0,
                                   "tool_errors": 0.0, "no_action": 0.0}


def test_wrong_answer_tool_errors_and_turn_budget():
    tool = RecordingTool(ToolResult("", "ZeroDivisionError: division by zero", FailureKind.EXCEPTION))
    task = ReactMath(tool=tool, turns=2)
    case = task.cases("eval", 1, seed=0)[0]
    state, _ = task.reset(case)
    observation, done = task.step(state, "```python\n1/0\n```")
    assert "[exception] ZeroDivisionError" in observation and not done
    observation, done = task.step(state, "hmm")
    assert done and "Out of turns" in observation and task.reward(state) == 0.0
    assert task.metrics(state)["tool_errors"] == 1.0 and task.metrics(state)["no_action"] == 1.0
    state, _ = task.reset(case)
    task.step(state, f"\\boxed{{{int(case.answer) + 1}}}")
    assert task.reward(state) == 0.0


def test_user_jsonl_problems(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    lines = [{"question": f"q{i}", "answer": str(i), "split": "train"} for i in range(4)] + [
        {"question": "e", "answer": "1", "split": "eval"}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    task = ReactMath(tool=RecordingTool(ToolResult("", "", None)), problems_file=path)
    assert {c.question for c in task.cases("train", 4)} == {"q0", "q1", "q2", "q3"}
    assert {c.question for c in task.cases("eval", 1)} == {"e"}
    with pytest.raises(ValueError, match="the file has 4"):
        task.cases("train", 5)
    # lines without a split: held out by content, never in both splits
    path.write_text("\n".join(json.dumps({"question": f"what is {i} + 1?", "answer": str(i + 1)})
                              for i in range(50)) + "\n")
    records = load_problems(path)
    held_out = {r["question"] for r in records if r["split"] == "eval"}
    assert 0 < len(held_out) < 25 and {r["split"] for r in records} == {"train", "eval"}
    # the same question in both splits is an overlap
    path.write_text('{"id": "a", "question": "1 + 1?", "answer": "2", "split": "train"}\n'
                    '{"id": "b", "question": "1  +  1?", "answer": "2", "split": "eval"}\n')
    with pytest.raises(ValueError, match="problem 'b' \\(eval\\) repeats the question of 'a' \\(train\\).*overlaps"):
        load_problems(path)
    path.write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:1: missing field 'answer'"):
        load_problems(path)
    path.write_text('{"question": "q", "answer": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: not valid JSON"):
        load_problems(path)


# ------------------------------------------------ the real sandbox as the tool

def _sandbox_ready() -> bool:
    try:
        from coevolve.sandbox import Sandbox  # noqa: F401
    except ImportError:
        return False
    return True


needs_sandbox = pytest.mark.skipif(not _sandbox_ready(), reason="coevolve.sandbox.Sandbox not landed yet")


@needs_sandbox
def test_hostile_tool_calls_are_contained(tmp_path: Path):
    from coevolve.agents.tools import SandboxTool

    outside = tmp_path / "written_by_tool.txt"
    tool = SandboxTool(timeout_s=3)
    task = ReactMath(tool=tool, turns=6)
    try:
        state, _ = task.reset(task.cases("train", 1)[0])
        observation, _ = task.step(state, "```python\nwhile True:\n    pass\n```")
        assert "[timeout]" in observation
        observation, _ = task.step(state, f"```python\nopen({str(outside)!r}, 'w').write('x')\nprint('wrote')\n```")
        assert not outside.exists()
        observation, _ = task.step(
            state, "```python\nimport socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\nprint('online')\n```"
        )
        assert "online" not in observation and "[" in observation
        observation, _ = task.step(state, "```python\nimport os\nos.system('touch /tmp/coevolve_tool_escape')\nprint(6*7)\n```")
        assert not os.path.exists("/tmp/coevolve_tool_escape")
        observation, done = task.step(state, "```python\nprint(6 * 7)\n```")
        assert observation == "Python output:\n42"  # the sandbox still works after all of that
        assert task.metrics(state)["tool_errors"] >= 3
    finally:
        task.close()


def test_problems_file_with_duplicate_ids_or_missing_fields_is_refused(tmp_path):
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": "a", "question": "1+1?", "answer": "2"}\n{"id": "a", "question": "2+2?", "answer": "4"}\n')
    with pytest.raises(ValueError, match=r"dup.jsonl:2: duplicate id 'a' \(first on line 1\)"):
        load_problems(dup)
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"id": "a", "question": "1+1?"}\n')
    with pytest.raises(ValueError, match=r"missing.jsonl:1: missing field 'answer'"):
        load_problems(missing)
    with pytest.raises(ValueError, match="no such problems file"):
        load_problems(tmp_path / "nope.jsonl")


def test_action_pattern_accepts_a_tool_block_or_a_boxed_answer_only():
    import re

    pattern = ReactMath.action_pattern
    assert re.fullmatch(pattern, "```python\nprint(2 + 2)\n```")
    assert re.fullmatch(pattern, "\\boxed{-3/4}")
    assert not re.fullmatch(pattern, "The answer is 4.")


def test_a_problems_file_counts_from_the_configs_folder(tmp_path: Path, monkeypatch):
    """[task] problems_file (an option its factory annotates Path) counts from the TOML's folder, as a config's
    other paths do, in a run and in an agent comparison's [task.<name>] table, whatever the working directory."""
    from coevolve.commands.run import load_run_config
    from coevolve.plan import load_compare_config
    from tasks.registry import path_options

    assert path_options("react_math") == ("problems_file",) and path_options("sudoku") == ()
    folder = tmp_path / "conf"
    folder.mkdir()
    lines = [{"question": f"q{i}", "answer": str(i), "split": s} for i, s in enumerate(["train"] * 4 + ["eval"] * 4)]
    (folder / "mine.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    run = folder / "run.toml"
    run.write_text('[run]\nmethod = "esopt"\ntask = "react_math"\nbudget = 64\n[task]\nproblems_file = "mine.jsonl"\n')
    monkeypatch.chdir(tmp_path)  # not the TOML's folder
    config = load_run_config(run, {})
    assert config.task["problems_file"] == str((folder / "mine.jsonl").resolve())
    assert {c.question for c in config.build_task().cases("train", 4)} == {"q0", "q1", "q2", "q3"}
    compare = folder / "cmp.toml"
    compare.write_text('[compare]\nkind = "agent"\nmethods = ["base", "esopt"]\ntasks = ["react_math"]\n'
                       'budgets = [64]\nseeds = [0]\n[eval]\nproblems = 2\n'
                       '[task.react_math]\nproblems_file = "mine.jsonl"\n')
    assert load_compare_config(compare).task["react_math"]["problems_file"] == str((folder / "mine.jsonl").resolve())
    # a file option naming no file is named as written
    from coevolve.base.errors import ConfigError

    run.write_text(run.read_text().replace('"mine.jsonl"', '"gone.jsonl"'))
    with pytest.raises(ConfigError, match=r"task\.problems_file names no file \(counted from the config's folder\) "
                                          r"\(got '.*/conf/gone.jsonl'\)"):
        load_run_config(run, {}).build_task()
