"""`coevolve run --resume DIR` and `coevolve mirror DIR` write only into a run's directory, and refuse what
they cannot continue before any engine loads (s51 walkthrough, findings 1, 4, 6, 7 and 8).

The CLI with the fake engine where a run needs one (tests/search_fakes.py) and the real sandbox on
tsp_construct, as tests/test_search_methods.py runs it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import coevolve.base.mirror as mirror_module
from coevolve.cli import main
from coevolve.engine import pool
from coevolve.runstore import RunStore, read_jsonl
from search_fakes import FakeEngine


class ClosingFakeEngine(FakeEngine):
    """The fake engine where the CLI builds one (pool.build_engine)."""

    def close(self) -> None:
        pass


def no_engine(*args, **kwargs):
    pytest.fail("an engine was built for a resume that is refused or shown")


def config_file(folder: Path, budget: int = 6, extra: str = "") -> Path:
    path = folder / "c.toml"
    path.write_text(f'[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = {budget}\n'
                    f'[sample]\nbatch = 3\n[sampling]\ntemperature = 0.7\n{extra}')
    return path


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def refused(capsys, argv: list[str], folder: Path) -> str:
    """The one error line of `coevolve ARGV` (exit 2, nothing written under `folder`)."""
    capsys.readouterr()  # what ran before
    before = snapshot(folder)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert snapshot(folder) == before, "a refused command wrote files"
    return err.strip()


def finished_run(tmp_path: Path, monkeypatch, budget: int = 6) -> Path:
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    run = tmp_path / "r"
    assert main(["run", str(config_file(tmp_path, budget)), "--out", str(run), "--no-progress"]) == 0
    return run


class Interrupting(ClosingFakeEngine):
    """Ctrl-C during the run's second generation: its first step is logged, the rest is not."""

    def chat(self, *args, **kwargs):
        if self.calls:
            raise KeyboardInterrupt
        return super().chat(*args, **kwargs)


def killed_run(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Interrupting())
    run = tmp_path / "r"
    assert main(["run", str(config_file(tmp_path)), "--out", str(run), "--no-progress"]) == 130
    assert [e["type"] for e in read_jsonl(run / "events.jsonl")] == ["start", "step"]
    return run


def candidates(run: Path) -> list[dict]:
    return [{k: v for k, v in c.items() if k != "seconds"} for c in read_jsonl(run / "candidates.jsonl")]


def edit(run: Path, old: str, new: str) -> None:
    text = (run / "config.toml").read_text()
    assert old in text
    (run / "config.toml").write_text(text.replace(old, new))


# -- 1: a folder holding only a config.toml is not a run ------------------------------------------------
def test_resume_and_mirror_refuse_a_task_folder_holding_only_a_config(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pool, "build_engine", no_engine)
    assert main(["new-task", "my_problem", "--dir", str(tmp_path)]) == 0
    folder = tmp_path / "my_problem"
    capsys.readouterr()
    expected = (f"{folder} holds a config.toml but no run log (events.jsonl): it is not a run; start one with "
                f"`coevolve run {folder / 'config.toml'}`")
    for argv in (["run", "--resume", str(folder)], ["run", "--resume", str(folder), "--plan"],
                 ["mirror", str(folder), "--to", "tensorboard"]):
        assert refused(capsys, argv, tmp_path).endswith(expected)
    # a run's config copied into a folder (a built-in task: nothing else would stop the resume)
    copied = tmp_path / "onlycfg"
    copied.mkdir()
    (copied / "config.toml").write_text(config_file(tmp_path).read_text())
    assert refused(capsys, ["run", "--resume", str(copied)], tmp_path).endswith(
        f"{copied} holds a config.toml but no run log (events.jsonl): it is not a run; start one with "
        f"`coevolve run {copied / 'config.toml'}`")


def test_a_run_killed_before_its_start_event_resumes(tmp_path, monkeypatch, capsys):
    """RunStore.create leaves the run log empty until the start event: a kill in between (here, while the
    engine loads) leaves a directory --resume continues to the run that was never killed."""
    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pool, "build_engine", killed)
    run = tmp_path / "r"
    assert main(["run", str(config_file(tmp_path)), "--out", str(run), "--no-progress"]) == 130
    assert (run / "events.jsonl").read_text() == "" and (run / "config.toml").exists()
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    events = read_jsonl(run / "events.jsonl")
    assert [events[0]["type"], events[-1]["type"]] == ["start", "end"]
    (tmp_path / "whole").mkdir()
    whole = finished_run(tmp_path / "whole", monkeypatch)
    assert candidates(run) == candidates(whole)


def test_a_run_directory_written_before_the_marker_still_resumes(tmp_path, monkeypatch, capsys):
    """An old run directory: a config.toml and a run log with its start event (no empty log at creation)."""
    run = killed_run(tmp_path, monkeypatch)
    assert RunStore.open_run(run).dir == run
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    assert read_jsonl(run / "events.jsonl")[-1]["type"] == "end"


# -- 2: an edited config.toml: the key, both values and the way out, before the engine ---------------------
def test_a_resume_under_an_edited_config_names_the_key_before_the_engine_loads(tmp_path, monkeypatch, capsys):
    run = killed_run(tmp_path, monkeypatch)
    monkeypatch.setattr(pool, "build_engine", no_engine)
    edit(run, "temperature = 0.7", "temperature = 0.9")
    line = refused(capsys, ["run", "--resume", str(run), "--no-progress"], tmp_path)
    assert line == (f"coevolve run: error: {run / 'config.toml'} was edited since the run started: "
                    "sampling.temperature was 0.7, is now 0.9; a run goes on under the config it started with: "
                    "put back sampling.temperature = 0.7")
    assert refused(capsys, ["run", "--resume", str(run), "--plan"], tmp_path) == line
    edit(run, "temperature = 0.9", "temperature = 0.7")
    edit(run, "budget = 6", "budget = 9")
    line = refused(capsys, ["run", "--resume", str(run), "--no-progress"], tmp_path)
    assert line.endswith("run.budget was 6, is now 9; a run goes on under the config it started with: put back "
                         f"run.budget = 6, or give the run more evaluations with `coevolve run --resume {run} "
                         "--budget 9`")
    # the way out it names works
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    assert main(["run", "--resume", str(run), "--budget", "9", "--no-progress"]) == 0
    assert json.loads((run / "summary.json").read_text())["evaluations"] == 9


def test_a_finished_run_with_an_edited_config_shows_its_table_and_says_the_edit_is_not_read(
        tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    monkeypatch.setattr(pool, "build_engine", no_engine)
    capsys.readouterr()
    assert main(["run", "--resume", str(run)]) == 0
    assert "note:" not in capsys.readouterr().out  # unedited: no note
    edit(run, "temperature = 0.7", "temperature = 0.9")
    assert main(["run", "--resume", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{run} has finished: nothing to resume; `--budget N` gives it more evaluations"
    assert lines[1] == (f"note: {run / 'config.toml'} was edited since the run started: sampling.temperature was "
                        "0.7, is now 0.9; its edits are not read")


# -- 3: --plan makes the run's tracker check ------------------------------------------------------------------
def hide(monkeypatch, *names: str) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(mirror_module.importlib.util, "find_spec",
                        lambda name, *a, **k: None if name in names else found(name, *a, **k))


def test_plan_refuses_a_tracker_that_is_not_installed(tmp_path, monkeypatch, capsys):
    hide(monkeypatch, "mlflow")
    config = config_file(tmp_path, extra="[log]\nmlflow = true\n")
    line = refused(capsys, ["run", str(config), "--plan"], tmp_path)
    assert line == ("coevolve run: error: [log] mlflow = true needs MLflow, which is not installed: "
                    "pip install 'coevolve[mlflow]'")


# -- 4, 6: mirror's messages ------------------------------------------------------------------------------------
def test_mirror_names_its_own_flag_and_a_missing_directory_as_run_does(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    hide(monkeypatch, "mlflow")
    assert refused(capsys, ["mirror", str(run), "--to", "mlflow"], tmp_path) == (
        "coevolve mirror: error: --to mlflow needs MLflow, which is not installed: pip install 'coevolve[mlflow]'")
    missing = tmp_path / "nonexistent"
    assert refused(capsys, ["mirror", str(missing), "--to", "tensorboard"], tmp_path) == (
        f"coevolve mirror: error: run directory not found: {missing}")
    assert refused(capsys, ["run", "--resume", str(missing)], tmp_path) == (
        f"coevolve run: error: run directory not found: {missing}")


# -- 5: --budget N that is the run's budget already --------------------------------------------------------------
def test_resume_with_the_runs_own_budget_says_so(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    monkeypatch.setattr(pool, "build_engine", no_engine)
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--budget", "6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{run} has finished: nothing to resume; --budget 6 is already the run's budget; "
                          "give a larger N\n")


def test_an_agent_run_under_an_edited_config_is_refused_before_the_engine_loads(tmp_path, monkeypatch, capsys):
    """The same check for an agent run (its start event as es_agent writes it), through `coevolve run`."""
    from coevolve.agents.es_agent import EVENT_VERSION, KIND, start_event
    from coevolve.agents.runconfig import AgentRunConfig
    from coevolve.base.config import as_dict, dump_toml, load_config

    monkeypatch.setattr(pool, "build_engine", no_engine)
    config = load_config(AgentRunConfig, Path(__file__).resolve().parents[1] / "examples" / "sudoku_esopt.toml")
    store = RunStore.create(tmp_path / "agent", dump_toml(as_dict(config)))
    logged = as_dict(config)
    logged["es"]["sigma"] *= 2
    with store.event_writer() as log:
        log.append(start_event(KIND, EVENT_VERSION, logged))
    line = refused(capsys, ["run", "--resume", str(store.dir), "--no-progress"], tmp_path)
    assert line.endswith(f"es.sigma was {logged['es']['sigma']}, is now {config.es.sigma}; a run goes on under the "
                         f"config it started with: put back es.sigma = {logged['es']['sigma']}")
