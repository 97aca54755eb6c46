"""A run directory's writer lock is held exactly while someone writes it, and let go when that one is done,
not when Python happens to collect a store.

`coevolve report RUN` writes progress.png and report.md into the run: it holds the run's lock from its first
read to its last write (as a comparison's report holds the comparison's), so a `coevolve run --resume RUN`
started meanwhile is refused with the two-writers line rather than outlived by a report of the run as it
stood before it; a run another process writes is refused as still running, summary or not. And every owner
of a writing store (`coevolve run`, new or resumed, finished, refused or interrupted; an agent run; a
comparison's agent arm) closes it where its work ends: with the collector off, the lock is free once the
call returns.

Light: the fake engines of tests/search_fakes.py and tests/test_agents_es.py, the holder process of
tests/test_run_lock.py; no vLLM."""

from __future__ import annotations

import fcntl
import gc
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coevolve.base.errors import UsageError
from coevolve.cli import main
from coevolve.engine import pool
from coevolve.report import rendering
from coevolve.runstore import LOCK, RunStore, read_jsonl
from test_agents_es import FakeEngine as AgentEngine
from test_run_lock import ROOT, coevolve, start_holder, stop, two_writers
from test_write_failures import ClosingFakeEngine, Interrupting
from conftest import child_environment

RUN_TOML = '[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 6\n[sample]\nbatch = 3\n'
AGENT_TOML = ('[run]\ntask = "sudoku"\nmethod = "esopt"\nbudget = 24\nseed = 3\n[task]\nmasked = 2\n'
              '[agent]\npopulation = 4\nbatch = 2\neval_cases = 2\n[es]\nsigma = 1e-3\nalpha = 1e-3\n'
              'generations = 10\n')


class ClosingAgentEngine(AgentEngine):
    def close(self) -> None:
        pass


@pytest.fixture
def kept_alive(monkeypatch):
    """Every RunStore made while the test runs, kept referenced (as a traceback, a notebook's variable or a
    reference cycle would keep one), with the cyclic collector off: a lock that only a store's collection
    lets go stays held, so what frees it is the owner's close."""
    kept: list[RunStore] = []
    made = RunStore.__init__

    def keep(self, directory):
        made(self, directory)
        kept.append(self)

    monkeypatch.setattr(RunStore, "__init__", keep)
    gc.collect()  # what earlier tests left for it, so it cannot be what frees a lock here
    gc.disable()
    try:
        yield kept
    finally:
        gc.enable()


def locked(directory: Path) -> bool:
    """Whether anyone, this process included, holds `directory`'s writer lock: a descriptor of our own is
    its own open file, which flock sets against every other (writer_of does not count this process)."""
    fd = os.open(directory / LOCK, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def heuristic_run(tmp_path: Path, monkeypatch, engine: type = ClosingFakeEngine) -> tuple[Path, int]:
    config = tmp_path / "c.toml"
    config.write_text(RUN_TOML)
    run = tmp_path / "r"
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: engine())
    return run, main(["run", str(config), "--out", str(run), "--no-progress"])


def test_a_resume_started_while_a_report_writes_the_run_is_refused(tmp_path, monkeypatch, capsys):
    """The report is stopped in its first plot, its lock held, while another process resumes the run."""
    run, code = heuristic_run(tmp_path, monkeypatch)
    assert code == 0, capsys.readouterr().err
    events = (run / "events.jsonl").read_bytes()
    plot = rendering.plot_run_progress
    tried = []

    def resume_meanwhile(*args, **kwargs):
        tried.append(coevolve("run", "--resume", str(run), "--no-progress"))
        return plot(*args, **kwargs)

    monkeypatch.setattr(rendering, "plot_run_progress", resume_meanwhile)
    written = rendering.render_run(run)
    [resume] = tried
    assert resume.returncode == 2, resume.stdout + resume.stderr
    lines = resume.stderr.strip().splitlines()
    assert len(lines) == 1, resume.stderr
    assert re.fullmatch(two_writers("coevolve run: error: ", run, os.getpid(), f"`coevolve run --resume {run}`"),
                        lines[0]), lines[0]
    assert (run / "events.jsonl").read_bytes() == events
    assert written["report.md"].is_file() and written["progress.png"].is_file()
    assert not locked(run)  # the report let go of it: the same resume goes on now
    again = coevolve("run", "--resume", str(run), "--no-progress")
    assert again.returncode == 0 and "has finished: nothing to resume" in again.stdout, again.stdout + again.stderr


def test_a_report_of_a_run_another_process_writes_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """A run with a summary.json that another process has taken up again (a resume, an extension): the
    report would race it for progress.png, so it is refused as a run without one is."""
    run, code = heuristic_run(tmp_path, monkeypatch)
    assert code == 0, capsys.readouterr().err
    holder = start_holder("run", run)
    try:
        with pytest.raises(UsageError, match=re.escape(f"{run} is still running (pid {holder.pid} on ")):
            rendering.render_run(run)
        assert not (run / "report.md").exists()
        # one that began before the report looked (its writer check passed) and holds the run when the
        # report would take it: the report's own refusal, naming what to do once the run is done
        monkeypatch.setattr(RunStore, "writer", lambda self: None)
        with pytest.raises(UsageError) as refused:
            rendering.render_run(run)
        assert re.fullmatch(two_writers("", run, holder.pid, f"`coevolve report {run}`"), str(refused.value))
        assert not (run / "report.md").exists()
    finally:
        stop(holder)
    monkeypatch.undo()
    assert rendering.render_run(run)["report.md"].is_file()


def test_a_report_of_a_folder_that_is_no_run_leaves_no_lock_file_in_it(tmp_path):
    """A task folder `coevolve new-task` wrote holds a config.toml: refused before any hold."""
    (tmp_path / "config.toml").write_text(RUN_TOML)
    with pytest.raises(UsageError, match="is not a run directory"):
        rendering.render_run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_coevolve_run_lets_go_of_the_run_as_it_returns(tmp_path, monkeypatch, capsys, kept_alive):
    """New, interrupted, resumed, finished and shown, refused: each leaves the run unlocked."""
    run, code = heuristic_run(tmp_path, monkeypatch, Interrupting)
    assert code == 130 and kept_alive and not locked(run)
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0, capsys.readouterr().err
    assert read_jsonl(run / "events.jsonl")[-1]["type"] == "end" and not locked(run)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0  # finished: only shown
    assert not locked(run)
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--budget", "3", "--no-progress"]) == 2  # refused in its checks
    assert "below the run's budget" in capsys.readouterr().err and not locked(run)
    assert main(["report", str(run)]) == 0 and not locked(run)


def test_an_agent_run_lets_go_of_the_run_as_it_returns(tmp_path, monkeypatch, capsys, kept_alive):
    config = tmp_path / "agent.toml"
    config.write_text(AGENT_TOML)
    run = tmp_path / "a"
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingAgentEngine())
    assert main(["run", str(config), "--out", str(run), "--no-progress"]) == 0, capsys.readouterr().err
    assert (run / "summary.json").is_file() and kept_alive and not locked(run)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0 and not locked(run)
    assert main(["report", str(run)]) == 0 and not locked(run)
    # and another process can take it up at once
    take = ("import sys\nfrom coevolve.runstore import RunStore\n"
            "RunStore.open_run(sys.argv[1], write=True)\nprint('held')")
    done = subprocess.run([sys.executable, "-c", take, str(run)], cwd=ROOT, env=child_environment(),
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "held", done.stderr


def test_an_agent_comparison_lets_go_of_its_arms_crashed_or_done(tmp_path, kept_alive):
    """The crash's traceback (pytest.raises keeps it) holds the arm's store: the arm is let go all the same."""
    from coevolve.compare import run_comparison
    from coevolve.plan import RunSpec, load_compare_config
    from test_agents_compare import _Killed, Resettable, _tiny

    config = load_compare_config(_tiny(tmp_path))
    root = tmp_path / "cmp"
    arm = RunSpec("sudoku", "esopt", 8, 0).directory(root)
    crashing = Resettable()
    crashing.crash_at = 3  # in the arm's second round
    with pytest.raises(_Killed):
        run_comparison(config, root, engine=crashing, log=lambda line: None)
    assert (arm / "events.jsonl").is_file() and not (arm / "summary.json").exists()
    assert kept_alive and not locked(arm) and not locked(root)
    run_comparison(config, root, engine=Resettable(), log=lambda line: None)
    assert (arm / "summary.json").is_file() and not locked(arm) and not locked(root)
