"""`coevolve run --resume DIR` reads DIR/events.jsonl once for its checks (the method, whether the run has
ended, an edited config.toml, an extension, the finished table's note), where each read it again: a long
run's log was parsed five or six times before the engine loaded. The loop reads it for itself afterwards.

The CLI with the fake engine and the real sandbox on tsp_construct (tests/test_resume_safety.py's runs)."""

from __future__ import annotations

import json

from coevolve.cli import main
from coevolve.engine import pool
from coevolve.runstore import RunStore
from test_resume_safety import ClosingFakeEngine, edit, finished_run, killed_run


def counted(monkeypatch) -> tuple[list[int], list[int]]:
    """(the reads of a run's log so far, that count when the engine was built)."""
    reads, at_engine = [], []
    events = RunStore.events
    monkeypatch.setattr(RunStore, "events", lambda self: reads.append(1) or events(self))

    def build(*args, **kwargs):
        at_engine.append(len(reads))
        return ClosingFakeEngine()

    monkeypatch.setattr(pool, "build_engine", build)
    return reads, at_engine


def test_a_killed_run_is_checked_on_one_read_of_its_log(tmp_path, monkeypatch):
    run = killed_run(tmp_path, monkeypatch)
    reads, at_engine = counted(monkeypatch)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    assert at_engine == [1]
    assert json.loads((run / "summary.json").read_text())["evaluations"] == 6


def test_a_finished_run_shows_its_table_and_note_on_one_read(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    edit(run, "temperature = 0.7", "temperature = 0.9")
    reads, at_engine = counted(monkeypatch)
    capsys.readouterr()
    assert main(["run", "--resume", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{run} has finished") and out[1].startswith("note: ") and out[1].endswith(
        "sampling.temperature was 0.7, is now 0.9; its edits are not read")
    assert len(reads) == 1 and not at_engine


def test_an_extension_reads_the_log_again_only_after_logging_to_it(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    reads, at_engine = counted(monkeypatch)
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--budget", "9", "--plan"]) == 0  # writes nothing: one read
    assert "budget raised 6 -> 9" in capsys.readouterr().out and len(reads) == 1
    reads.clear()
    assert main(["run", "--resume", str(run), "--budget", "9", "--no-progress"]) == 0
    assert at_engine == [2]
    assert json.loads((run / "summary.json").read_text())["evaluations"] == 9
