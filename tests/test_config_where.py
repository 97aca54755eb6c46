"""Bad configs from the config sweep (benchmarks/results/s55/config_sweep.md W4, W7, W8, W12) whose
refusal did not name the key written wrong, contradicted itself or took two lines: through the real CLI
(--plan: no engine), exit 2, one error line, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.cli import main
from test_compare_baseline import MINE

MODULE = "nosuchpkg_where.mod:Cls"  # a module task or method that does not import
NOT_IMPORTED = "cannot import nosuchpkg_where.mod: ModuleNotFoundError: No module named 'nosuchpkg_where'"
COMPARE = '[compare]\nmethods = {methods}\ntasks = ["tsp_construct"]\nbudgets = [40]\nseeds = [0]\n'


def refused(tmp_path: Path, capsys, text: str, *command: str) -> list[str]:
    """`coevolve COMMAND c.toml --plan` on `text`: exit 2, nothing written; its stderr lines."""
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    before = sorted(tmp_path.rglob("*"))
    assert main([*command, str(config), "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    assert sorted(tmp_path.rglob("*")) == before
    return err.splitlines()


# -- W4: a task or method that does not load is named by the key that gave it -----------------------------
@pytest.mark.parametrize("command, text, expected", [
    ("run", f'[run]\nmethod = "sample"\ntask = "{MODULE}"\n', f"run.task: {MODULE}: {NOT_IMPORTED}"),
    ("run", f'[run]\nmethod = "esopt"\n[task]\nname = "{MODULE}"\n', f"task.name: {MODULE}: {NOT_IMPORTED}"),
    ("compare", COMPARE.format(methods='["nomethod.py"]'), "compare.methods[0]: method file not found: nomethod.py"),
    ("compare", COMPARE.format(methods=f'["sample", "{MODULE}"]'),
     f"compare.methods method '{MODULE}': {NOT_IMPORTED}"),  # (tests/test_method_file_checks.py's form)
    ("compare", COMPARE.format(methods='["sample", "wide"]') + '[compare.arms.wide]\nmethod = "nomethod.py"\n',
     "compare.arms.wide.method: method file not found: nomethod.py"),
    ("compare", COMPARE.format(methods='["sample", "wide"]') + f'[compare.arms.wide]\nmethod = "{MODULE}"\n',
     f"compare.arms.wide.method method '{MODULE}': {NOT_IMPORTED}"),
    ("run", COMPARE.format(methods='["nomethod.py"]'), "compare.methods[0]: method file not found: nomethod.py"),
])
def test_a_task_or_method_that_does_not_load_is_named_by_its_key(tmp_path, capsys, command, text, expected):
    line = refused(tmp_path, capsys, text, command)[-1]
    assert line.startswith(f"coevolve {command}: error: config error: {expected}"), line


def test_a_comparisons_file_method_counts_from_its_folder_under_run_plan(tmp_path, capsys, monkeypatch):
    """`coevolve run sub/c.toml --plan` of a comparison listing a method file beside the TOML: found there,
    as `coevolve compare` finds it, not looked for in the working directory."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.py").write_text(MINE)
    (tmp_path / "sub" / "c.toml").write_text(COMPARE.format(methods='["mine.py", "eoh"]'))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "sub/c.toml", "--plan"]) == 0, capsys.readouterr().err


# -- W7: [[task]] is named as the array of tables it is ---------------------------------------------------
@pytest.mark.parametrize("text", [
    '[run]\nmethod = "esopt"\nbudget = 64\n[[task]]\nname = "sudoku"\n',
    '[run]\nmethod = "sample"\nbudget = 64\n[[task]]\nname = "tsp_construct"\n',
    '[run]\nmethod = "esopt"\ntask = "sudoku"\nbudget = 64\n[[task]]\nmasked = 1\n',
])
def test_an_array_of_task_tables_is_named_as_such(tmp_path, capsys, text):
    assert refused(tmp_path, capsys, text, "run") == [
        "coevolve run: error: config error: task must be one table ([task] name = ..., and the task's options), "
        "not an array of tables ([[task]])"]


# -- W8: a refused config's error is its only line: no note on sections it does not read before it -------
@pytest.mark.parametrize("extra, expected", [
    ('[start]\nprograms = ["nofile.py"]\n', "start.programs[0]: cannot read"),  # check_built's
    ('[model]\npath = "/nonexistent-where"\n', "model.path: model directory"),  # --plan's model check
])
def test_no_unread_section_note_before_a_refusal(tmp_path, capsys, extra, expected):
    lines = refused(tmp_path, capsys, f'[run]\nmethod = "eoh"\nbudget = 20\n[es]\nsigma = 0.01\n{extra}', "run")
    assert len(lines) == 1 and lines[0].startswith(f"coevolve run: error: config error: {expected}"), lines


# -- W12: an agent comparison written with the heuristic kind is told its kind --------------------------
ARMED = ('methods = ["base", "esopt", "esopt-wide"]\ntasks = ["sudoku"]\nbudgets = [64]\nseeds = [0]\n'
         '[compare.arms.esopt-wide]\nmethod = "esopt"\nagent = { population = 16 }\n')


@pytest.mark.parametrize("command", ["compare", "run"])
@pytest.mark.parametrize("kind, default", [('kind = "heuristic"\n', ""), ("", " (the default)")])
def test_agent_methods_in_a_heuristic_comparison_name_its_kind(tmp_path, capsys, command, kind, default):
    line = refused(tmp_path, capsys, f"[compare]\n{kind}{ARMED}", command)[-1]
    assert line == (f'coevolve {command}: error: config error: compare.kind is "heuristic"{default}, but '
                    "compare.methods are an agent comparison's (base, esopt, esopt-wide: esopt): give [compare] "
                    'kind = "agent"'), line


def test_one_agent_method_among_heuristic_ones_is_named_as_a_method(tmp_path, capsys):
    """Not every method an agent one: most likely a misspelt heuristic method, named by its key."""
    line = refused(tmp_path, capsys, COMPARE.format(methods='["eoh", "esopt"]'), "compare")[-1]
    assert line.startswith("coevolve compare: error: config error: compare.methods[1] must be one of"), line
