"""A method file is named the same way wherever a run's method is named on its own: the plan's head, the
table `coevolve run` prints at its end and a run's report.md (methods.display_name: its label, then the
path it was given); a comparison's report names it among the others by that label (methods.label). A
built-in keeps the name it was given.

Why: s55's read of its change ("two ways"): `--plan` said 'HillClimb (/x/toy_method.py)', the run's table
and report.md the bare path. Real CLI path: `coevolve run` with the fake engine where the CLI builds one
(as tests/test_search_methods.py) and the real sandbox on tsp_construct."""

from __future__ import annotations

import pytest

from coevolve.cli import main
from coevolve.engine import pool
from coevolve.search import methods
from test_search_methods import ClosingFakeEngine, _toml, write_toy


def plan_head_name(out: str) -> str:
    """The method as the plan's first line names it: 'plan: NAME on TASK, budget ...'."""
    head = out.splitlines()[0]
    assert head.startswith("plan: ") and " on tsp_construct, budget" in head, out
    return head[len("plan: "):head.index(" on tsp_construct, budget")]


def table_row(out: str, name: str) -> str:
    return next(line.split("  ", 1)[1].strip() for line in out.splitlines() if line.startswith(f"{name} "))


@pytest.mark.parametrize("suffix", ["", "+esopt"])
def test_the_run_table_and_report_name_a_method_file_as_its_plan_does(tmp_path, monkeypatch, capsys, suffix):
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    toy = write_toy(tmp_path)
    method = f"{toy}{suffix}"
    config = _toml(tmp_path, method, "[toy]\nwidth = 2\n" + ("[es]\npopulation = 2\n" if suffix else ""), budget=6)
    assert main(["run", str(config), "--plan"]) == 0
    planned = plan_head_name(capsys.readouterr().out)
    label = "HillClimb+ESOpt" if suffix else "HillClimb"
    assert planned == f"{label} ({method})"

    run = tmp_path / "r"
    assert main(["run", str(config), "--out", str(run), "--no-progress"]) == 0
    assert table_row(capsys.readouterr().out, "method") == planned  # before: the bare path
    assert main(["report", str(run)]) == 0
    assert (run / "report.md").read_text().startswith(f"# Run: {planned} on tsp_construct, seed ")
    assert methods.label(method) == label  # a comparison's report names it so among the other methods
    assert methods.display_name(method) == planned  # the one function behind the three


def test_a_built_in_method_is_named_as_given_in_the_plan_and_the_run_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    config = _toml(tmp_path, "sample", "[sample]\nbatch = 2\n", budget=4)
    assert main(["run", str(config), "--plan"]) == 0
    assert plan_head_name(capsys.readouterr().out) == "sample"
    assert main(["run", str(config), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert table_row(capsys.readouterr().out, "method") == "sample"
