"""Bad agent-run inputs (audit items B5, C8, C9): one line naming the TOML key (dotted), the value and
what was expected. Configs are loaded as `coevolve run` loads them and their task built (no engine);
`--option` goes through the real `coevolve check-task` command."""

from pathlib import Path

import pytest

from coevolve.base.errors import UsageError
from coevolve.cli import main
from coevolve.commands.run import load_run_config

ROOT = Path(__file__).resolve().parents[1]


def build(tmp_path: Path, body: str):
    config = tmp_path / "config.toml"
    config.write_text(body)
    return load_run_config(config, {}).build_task()


def refused(tmp_path: Path, body: str) -> str:
    with pytest.raises(UsageError) as caught:
        build(tmp_path, body)
    message = str(caught.value)
    assert "\n" not in message
    return message


# B5: a task's own bounds are named as the config writes them
@pytest.mark.parametrize("body, message", [
    ('[run]\ntask = "sudoku"\n[task]\nmasked = -1\n', "config error: task.masked must be in 1..15 (got -1)"),
    ('[run]\ntask = "sudoku"\n[task]\nmasked = 100\n', "config error: task.masked must be in 1..15 (got 100)"),
    ('[run]\ntask = "sudoku9"\n[task]\nmasked = 81\n', "config error: task.masked must be in 1..80 (got 81)"),
    ('[run]\ntask = "sudoku"\n[task]\nsize = 5\n', "config error: task.size must be one of 4, 6, 9 (got 5)"),
    ('[run]\ntask = "react_math"\n[task]\nturns = -2\n', "config error: task.turns must be >= 1 (got -2)"),
])
def test_out_of_range_task_options_name_the_key(tmp_path, body, message):
    assert refused(tmp_path, body) == message


def test_a_misspelt_task_option_gets_did_you_mean(tmp_path):
    assert refused(tmp_path, '[run]\ntask = "sudoku"\n[task]\nmaskd = 1\n') == (
        "config error: task.maskd is not an option of sudoku (its options: masked, size); did you mean 'masked'?")


@pytest.mark.parametrize("option, message", [
    ("maskd=1", "--option maskd: is not an option of sudoku (its options: masked, size); did you mean 'masked'?"),
    ("masked=-1", "--option masked: must be in 1..15 (got -1)"),
    ("size=5", "--option size: must be one of 4, 6, 9 (got 5)"),
])
def test_check_task_option_errors_are_one_line(capsys, option, message):
    assert main(["check-task", "sudoku", "--option", option]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(message) and "\n" not in err and "Traceback" not in err


def test_react_math_check_task_turns(capsys):
    assert main(["check-task", "react_math", "--option", "turns=0"]) == 2
    assert capsys.readouterr().err.strip().endswith("--option turns: must be >= 1 (got 0)")


def test_a_problems_file_that_is_not_utf8_names_the_file_and_the_key(tmp_path):
    problems = tmp_path / "p.jsonl"
    problems.write_bytes(b'{"question": "1+1?", "answer": "2\xff"}\n')
    message = refused(tmp_path, '[run]\ntask = "react_math"\n[task]\nproblems_file = "p.jsonl"\n')
    assert message.startswith("config error: task.problems_file is not a usable problems file: ")
    assert f"{problems}: not UTF-8 text (byte 0xff at offset 33)" in message


def test_a_broken_problems_file_names_the_key_and_the_line(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"question": "1+1?"}\n')
    message = refused(tmp_path, '[run]\ntask = "react_math"\n[task]\nproblems_file = "p.jsonl"\n')
    assert message.startswith("config error: task.problems_file is not a usable problems file: ")
    assert "p.jsonl:1: missing field 'answer'" in message


# C8: a reply must leave room for its prompt in the engine's context
def test_max_tokens_must_fit_the_engines_context(tmp_path):
    assert refused(tmp_path, '[run]\ntask = "sudoku"\n[sampling]\nmax_tokens = 100000\n') == (
        "config error: sampling.max_tokens must be < model.max_len (2048): a prompt and its reply must fit "
        "(got 100000)")
    assert refused(tmp_path, '[run]\ntask = "sudoku"\n[sampling]\nmax_tokens = 4096\n[model]\nmax_len = 4096\n') \
        .startswith("config error: sampling.max_tokens must be < model.max_len (4096)")
    assert build(tmp_path, '[run]\ntask = "sudoku"\n[sampling]\nmax_tokens = 4096\n[model]\nmax_len = 8192\n')


# C9: only the legacy "default" values (an int 0, an empty string) are left out
def test_a_float_zero_is_refused_not_taken_as_the_default(tmp_path):
    assert refused(tmp_path, '[run]\ntask = "sudoku"\n[task]\nmasked = 0.0\n') == (
        "config error: task.masked must be an integer, as its default 4 is (got 0.0)")
    assert refused(tmp_path, '[run]\ntask = "react_math"\n[task]\nturns = 0.0\n') == (
        "config error: task.turns must be an integer, as its default 4 is (got 0.0)")


def test_legacy_zero_and_empty_options_still_mean_the_default(tmp_path):
    assert build(tmp_path, '[run]\ntask = "sudoku"\n[task]\nmasked = 0\n').masked == 4
    # configs written before the registry took options held every task's fields
    assert build(tmp_path, '[run]\ntask = "sudoku9"\n[task]\nmasked = 0\nturns = 0\nproblems_file = ""\n').masked == 10
    math = build(tmp_path, '[run]\ntask = "react_math"\n[task]\nturns = 0\nproblems_file = ""\nmasked = 0\n')
    assert math.turns == 4 and math.problems is None
    old = load_run_config(ROOT / "tests/data/old_runs/agent_before_events/config.toml", {}, new=False)
    assert old.build_task().masked == 4


def test_a_user_tasks_zero_option_is_passed_as_written(tmp_path):
    """0 means "the default" only for the built-in tasks' legacy fields: a user task's 0 is a value."""
    env = tmp_path / "env.py"
    env.write_text(
        "class Env:\n"
        "    name = 'env'\n"
        "    system_prompt = 'x'\n"
        "    def __init__(self, extra: int = 1, label: str = 'a') -> None:\n"
        "        self.extra, self.label = extra, label\n"
        "    def cases(self, split, n, seed=0): return []\n"
        "    def reset(self, case): return None, ''\n"
        "    def step(self, state, action): return '', True\n"
        "    def reward(self, state): return 0.0\n"
        "    def max_turns(self, case): return 1\n"
        "    def metrics(self, state): return {}\n")
    task = build(tmp_path, f'[run]\ntask = "{env}"\n[task]\nextra = 0\nlabel = ""\n')
    assert (task.extra, task.label) == (0, "")
