"""`coevolve eval --run DIR` on a heuristic run without best.py says why: no valid candidate in a run that
ended, a run that has not ended, or one that has not finished a step (walkthrough s51, finding 9)."""

from __future__ import annotations

import json

from coevolve.cli import main
from coevolve.runstore import RunStore
from test_extend import config, start


def test_a_finished_run_with_no_valid_heuristic_says_so(tmp_path, capsys):
    start(tmp_path / "r", config("sample", 10))
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    (tmp_path / "r" / "summary.json").write_text(json.dumps({**summary, "valid": 0, "valid_rate": 0.0,
                                                             "best": None}))
    (tmp_path / "r" / "best.py").unlink()  # as a run whose candidates all failed leaves it
    assert main(["eval", "--run", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"{tmp_path / 'r'} produced no valid heuristic (0 of 10 valid): nothing to evaluate")


def test_a_run_without_a_step_keeps_the_old_message(tmp_path, capsys):
    from coevolve.base.config import as_dict, dump_toml

    RunStore.create(tmp_path / "r", dump_toml(as_dict(config("sample", 10))))
    assert main(["eval", "--run", str(tmp_path / "r")]) == 2
    assert "has no best.py yet (the run has not finished a step)" in capsys.readouterr().err
