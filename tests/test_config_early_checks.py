"""Configs from the config sweep (benchmarks/results/s55/config_sweep.md W16 and its notes) that passed
`coevolve run --plan` or were refused by the wrong words: a [log] tracker that cannot open where it is sent
(once found only after the run had started, as a warning), a file with both [run] and [compare], and a
comparison's arm whose budget a flag gave, named as the comparison's. Through the real CLI: exit 2, one
error line naming the key or file, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.cli import main

RUN = '[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 400\n'
# an [endpoint] answers every request: the real run needs no engine or checkpoint before its own checks
SERVED = '[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "stub"\n'
COMPARE = ('[compare]\nmethods = ["eoh"]\ntasks = ["tsp_construct"]\nbudgets = [400]\nseeds = [0]\n'
           '[eoh]\noffspring = 500\n')


def refused(tmp_path: Path, capsys, text: str, *command: str) -> str:
    """`coevolve COMMAND c.toml ...` on `text`: exit 2, nothing written, one error line (a comparison given
    to `run` first says which arm it plans), which is returned."""
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    before = sorted(tmp_path.rglob("*"))
    assert main([command[0], str(config), *command[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "warning" not in err, err
    assert sorted(tmp_path.rglob("*")) == before
    lines = err.splitlines()
    assert len(lines) == 1 or (len(lines) == 2 and "is a comparison; this is its arm" in lines[0]), err
    return lines[-1]


def planned(tmp_path: Path, capsys, text: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    before = sorted(tmp_path.rglob("*"))
    assert main(["run", str(config), "--plan"]) == 0, capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before  # --plan makes no folder the tracker would
    capsys.readouterr()


# -- W16: a tracker that cannot open is refused before the run, by its key -------------------------------
@pytest.mark.parametrize("command", [("run", "--plan"), ("run", "--out", "RUN")])
def test_an_unwritable_tensorboard_dir_is_refused_before_the_run(tmp_path, capsys, command):
    command = tuple(str(tmp_path / "out") if part == "RUN" else part for part in command)
    err = refused(tmp_path, capsys, RUN + SERVED + '[log]\ntensorboard = true\ntensorboard_dir = "/proc/x"\n',
                  *command)
    assert err.startswith("coevolve run: error: config error: log.tensorboard_dir cannot hold the event files: "
                          "/proc takes no new folder ("), err
    assert err.endswith("(got '/proc/x')"), err


def test_a_tensorboard_dir_under_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("")
    where = tmp_path / "notes.txt" / "tb"
    err = refused(tmp_path, capsys, RUN + f'[log]\ntensorboard = true\ntensorboard_dir = "{where}"\n', "run", "--plan")
    assert f"log.tensorboard_dir cannot hold the event files: {tmp_path / 'notes.txt'} is a file, not a folder" in err


@pytest.mark.parametrize("uri, problem", [
    ("bogus://x", "has a scheme MLflow has no tracking store for (it has: databricks, "),
    ("sqlite:////proc/x/mlflow.db", "cannot hold its database: /proc takes no new folder ("),
    ("mlruns", "is a path, which MLflow opens as a file store and refuses unless MLFLOW_ALLOW_FILE_STORE=true"),
])
def test_an_mlflow_uri_mlflow_cannot_open_is_refused_before_the_run(tmp_path, capsys, monkeypatch, uri, problem):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    for command in (("run", "--plan"), ("run", "--out", str(tmp_path / "out"))):
        err = refused(tmp_path, capsys, RUN + SERVED + f'[log]\nmlflow = true\nmlflow_uri = "{uri}"\n', *command)
        assert err.startswith(f"coevolve run: error: config error: log.mlflow_uri {problem}"), err
        assert err.endswith(f"(got {uri!r})"), err


def test_trackers_that_can_open_still_plan_and_nothing_is_made(tmp_path, capsys):
    # a server that is down is not asked (it may be up when the run starts); folders are made by the run only
    planned(tmp_path, capsys, RUN + '[log]\nmlflow = true\nmlflow_uri = "http://127.0.0.1:9"\n')
    planned(tmp_path, capsys, RUN + f'[log]\nmlflow = true\nmlflow_uri = "sqlite:///{tmp_path}/new/m.db"\n'
                                    f'tensorboard = true\ntensorboard_dir = "{tmp_path}/tb/deeper"\n')
    # a key of a tracker that is off is not the run's concern
    planned(tmp_path, capsys, RUN + '[log]\nmlflow_uri = "bogus://x"\ntensorboard_dir = "/proc/x"\n')


# -- a file that is both a run config and a comparison ---------------------------------------------------
@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_file_with_run_and_compare_is_named_as_both(tmp_path, capsys, command):
    err = refused(tmp_path, capsys, RUN + '[compare]\nmethods = ["eoh"]\n', command, "--plan")
    assert err == (f"coevolve {command}: error: config error: {tmp_path / 'c.toml'} has both [run] and [compare]: "
                   "a file is either a run config ([run], for `coevolve run`) or a comparison ([compare], for "
                   "`coevolve compare`), not both")


# -- a comparison's arm: a budget the flag gave is the run's, not compare.budgets -----------------------
def test_a_comparisons_arm_names_a_flags_budget_as_the_runs(tmp_path, capsys):
    err = refused(tmp_path, capsys, COMPARE, "run", "--budget", "50", "--plan")
    assert err.startswith("coevolve run: error: config error: eoh.offspring must be <= 50: "), err
    assert "(run.budget = 50)" in err and "compare.budgets" not in err, err
    # the comparison's own budget is still named where it wrote it
    err = refused(tmp_path, capsys, COMPARE, "run", "--plan")
    assert "(compare.budgets = 400)" in err and "run.budget" not in err, err
