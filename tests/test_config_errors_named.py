"""Bad configs whose error used to name another key than the one written wrong (config sweep B7, B8,
B9, W10, W15): through the real CLI, exit 2, one line naming the key as the file wrote it, nothing
written."""

from __future__ import annotations

from pathlib import Path

from coevolve.cli import main

AGENT = """
[run]
method = "esopt"
{task}
budget = 128
[task]
turns = 4
[agent]
population = 8
batch = 4
"""


def refused(tmp_path: Path, capsys, text: str, *command: str) -> str:
    """`coevolve COMMAND c.toml ...` on `text`: exit 2, one stderr line (returned), no file written."""
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    before = sorted(tmp_path.rglob("*"))
    assert main([command[0], str(config), *command[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert sorted(tmp_path.rglob("*")) == before
    return err


def test_a_misspelt_run_task_is_named_before_the_agent_sections(tmp_path, capsys):
    err = refused(tmp_path, capsys, AGENT.format(task='taskk = "react_math"'), "run", "--plan")
    assert "config error: run.taskk is not a known field" in err
    assert "did you mean 'task'?" in err


def test_a_missing_run_task_in_an_agent_config_says_so(tmp_path, capsys):
    text = AGENT.format(task="").replace("[task]\nturns = 4\n", "")
    err = refused(tmp_path, capsys, text, "run", "--plan")
    assert "config error: run.task is missing" in err
    assert "[agent]" in err and '"sudoku"' in err


def test_a_comparison_budget_over_the_bound_names_compare_budgets(tmp_path, capsys):
    text = '[compare]\nmethods = ["sample"]\ntasks = ["tsp_construct"]\nbudgets = [40, 10000000]\nseeds = [0]\n'
    for command in (("compare", "--plan"), ("run", "--plan")):
        err = refused(tmp_path, capsys, text, *command)
        assert "config error: compare.budgets[1] must be in 1..1000000" in err, err
        assert "run.budget" not in err


def test_a_default_arm_that_fails_is_named(tmp_path, capsys):
    # compare.methods left out: its default list has +trace2skill arms, whose [skill] every is too long here
    text = '[compare]\ntasks = ["tsp_construct"]\nbudgets = [40]\nseeds = [0]\n'
    err = refused(tmp_path, capsys, text, "compare", "--plan")
    assert err.startswith("coevolve compare: error: config error: skill.every ")
    assert "run.budget" not in err and "compare.budgets = 40" in err
    assert "(arm " in err and "compare.methods' default list" in err


def test_run_of_an_agent_comparison_with_no_trained_arm_is_one_line(tmp_path, capsys):
    text = '[compare]\nkind = "agent"\nmethods = ["base"]\ntasks = ["sudoku"]\nbudgets = [128]\nseeds = [0]\n'
    err = refused(tmp_path, capsys, text, "run", "--plan")
    assert "no training arm" in err and "coevolve compare" in err


def test_a_run_config_given_to_compare_points_to_run(tmp_path, capsys):
    text = '[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 4\n'
    err = refused(tmp_path, capsys, text, "compare", "--plan")
    assert "run is not a known section" in err and "a run config? use `coevolve run " in err


def test_a_key_pasted_into_api_key_env_is_not_echoed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("sk-proj-abc123SECRET", raising=False)
    text = ('[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 4\n[endpoint]\n'
            'base_url = "http://127.0.0.1:9/v1"\nmodel = "stub"\napi_key_env = "sk-proj-abc123SECRET"\n')
    err = refused(tmp_path, capsys, text, "run", "--out", str(tmp_path / "run"))
    assert "endpoint.api_key_env" in err and "looks like a key" in err
    assert "SECRET" not in err and "sk-proj" not in err


def test_a_name_in_other_case_is_suggested_as_written(tmp_path, capsys, monkeypatch):
    """`TSP_construct`: the task of that name in lower case, not the nearest spelling difflib finds
    ('kp_construct'), as the s55 config sweep found (W14)."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text('[run]\ntask = "TSP_construct"\n')
    assert main(["run", str(config), "--plan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'tsp_construct'?" in err, err


def test_a_config_saved_with_a_byte_order_mark_reads_as_written(tmp_path, capsys, monkeypatch):
    """Some editors save UTF-8 with a byte-order mark; TOML's parser took it for a statement (`Invalid
    statement (at line 1, column 1)`, s55 config sweep W6). The mark is no setting: the file plans."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_bytes("\ufeff[run]\ntask = \"tsp_construct\"\nbudget = 8\n".encode("utf-8"))
    assert main(["run", str(config), "--plan"]) == 0, capsys.readouterr().err
    assert "budget T = 8" in capsys.readouterr().out
