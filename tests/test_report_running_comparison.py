"""`coevolve report` of a comparison and `coevolve compare` write the same files (report.md, table.csv,
runs.csv, results.json, plots/), so they never write them at once (kill/resume sweep, finding 1):
- a report of a comparison another process runs is refused with one line, as a running run's is, and
  writes nothing;
- a report holds the comparison's writer lock from its first read to its last write, so a `coevolve
  compare` started meanwhile is refused with one line instead of being outlived by a report of the runs
  as they stood before it; the lock is let go once the report is written.
And the report of a comparison killed before its test scoring says its finished runs are not scored
yet, not that "only 0 of them" scored (finding 9).

A real comparison each: one Sample arm proposed by the endpoint stub (tests/endpoint_stub.py), run by
the CLI in a child process, so this process holds none of its locks."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import endpoint_stub

from coevolve.base.config import dump_toml
from coevolve.cli import main
from coevolve.report import rendering
from test_run_lock import SINCE, coevolve, snapshot, start_holder, stop

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest
WRITTEN = ("report.md", "table.csv", "runs.csv", "results.json")  # the files compare and report both write


def comparison(folder: Path, base_url: str) -> tuple[Path, Path]:
    """A finished comparison (its config, its --out), run by `coevolve compare` in a child process."""
    raw = {"compare": {"methods": ["sample"], "tasks": ["tsp_construct"], "budgets": [2], "seeds": [0]},
           "sample": {"batch": 2, "population": 2}, "sandbox": {"timeout_s": 10, "workers": 1},
           "test": {"sizes": [20], "limit": 2, "workers": 1}, "context": {"constrain": False},
           "endpoint": {"base_url": base_url, "model": endpoint_stub.MODEL}}
    config, root = folder / "cmp.toml", folder / "cmp"
    config.write_text(dump_toml(raw))
    done = coevolve("compare", str(config), "--out", str(root), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert all((root / name).is_file() for name in WRITTEN), sorted(p.name for p in root.iterdir())
    return config, root


def test_a_report_of_a_comparison_another_process_runs_is_refused_and_writes_nothing(stub, tmp_path, capsys):
    _, root = comparison(tmp_path, stub.base_url)
    holder = start_holder("compare", root)  # holds it as `coevolve compare` does (compare.begin)
    try:
        before = snapshot(tmp_path)
        capsys.readouterr()
        assert main(["report", str(root)]) == 2
        said = capsys.readouterr()
        assert said.out == "" and said.err.count("\n") == 1, said
        assert re.fullmatch(
            re.escape(f"coevolve report: error: {root} is still running (pid {holder.pid} on "
                      f"{socket.gethostname()}, ") + SINCE + re.escape("): report it once it has finished\n"),
            said.err), said.err
        assert snapshot(tmp_path) == before, "a refused report wrote files"
    finally:
        stop(holder)
    assert main(["report", str(root)]) == 0  # the comparison has stopped: it is reported


def test_a_comparison_started_while_its_report_writes_is_refused(stub, tmp_path, capsys, monkeypatch):
    config, root = comparison(tmp_path, stub.base_url)
    draw = rendering.plot_progress
    rerun: list = []

    def meanwhile(*args, **kwargs):
        # the report has read the runs and not written yet: the moment a rerun would outlive it
        before = snapshot(tmp_path)
        rerun.append(coevolve("compare", str(config), "--out", str(root), "--no-progress"))
        rerun.append(snapshot(tmp_path) == before)
        return draw(*args, **kwargs)

    monkeypatch.setattr(rendering, "plot_progress", meanwhile)
    assert main(["report", str(root)]) == 0, capsys.readouterr().err
    done, unchanged = rerun
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"coevolve compare: error: {root} is being written by another process (pid "), lines
    assert f"(pid {os.getpid()} on {socket.gethostname()}, " in lines[0], lines[0]
    assert lines[0].endswith("): wait for it, or stop it, then run the comparison again"), lines[0]
    assert unchanged, "a refused comparison wrote files"
    # the report let go of the comparison once written: another process takes it
    stop(start_holder("compare", root))


def test_a_comparison_killed_before_its_test_scoring_says_its_runs_are_not_scored_yet(stub, tmp_path, capsys):
    _, root = comparison(tmp_path, stub.base_url)
    scores = list((root / "runs").glob("*/*/test.json"))
    assert len(scores) == 1
    for path in scores:  # as a comparison killed once its arms finished, before it scored them
        path.unlink()
    assert main(["report", str(root)]) == 0, capsys.readouterr().err
    report = (root / "report.md").read_text()
    line = next(line for line in report.splitlines() if "at budget 2: Sample:" in line)
    assert line == (f"- tsp_construct at budget 2: Sample: 1 of 1 seed produced a valid program; on test20 not "
                    f"scored yet (rerun `coevolve compare CONFIG --out {root}` to score it)."), line
    assert "of them scored" not in report


def test_a_comparison_run_in_this_process_lets_go_of_its_folder_once_it_has_written_it(stub, tmp_path, capsys):
    """A comparison held its folder until its process ended: one run from a notebook or a test (compare in
    process, then `coevolve report` in a shell) kept every report refused as "still running"."""
    (tmp_path / "first").mkdir()
    config, _ = comparison(tmp_path / "first", stub.base_url)
    root = tmp_path / "here"
    assert main(["compare", str(config), "--out", str(root), "--no-progress"]) == 0, capsys.readouterr().err
    done = coevolve("report", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
