"""Run directories damaged after the run wrote them (s53 walkthrough, "Corrupted run directories"): an
emptied events.jsonl, a step line deleted from it or repeated, a finished run's best.py deleted, a line
deleted from its candidates.jsonl. `coevolve run --resume` refuses a log it cannot replay with one line
before anything is written (it neither starts over nor appends a step after later ones); `coevolve
report` says what is wrong instead of rendering a misleading note or a silently different table; a
finished run's lost best.py is written again by `--resume`.

Real run directories, written by the real loop through the CLI with the fake engine
(tests/search_fakes.py) and the real sandbox on tsp_construct, as tests/test_resume_safety.py runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.cli import main
from coevolve.engine import pool
from coevolve.engine.base import Completion
from coevolve.runstore import read_jsonl
from search_fakes import FakeEngine


class ClosingFakeEngine(FakeEngine):
    """The fake engine where the CLI builds one (pool.build_engine)."""

    def close(self) -> None:
        pass


class TourEngine(ClosingFakeEngine):
    """Valid tsp_construct programs (the fake engine's own answers are not): the k-th nearest unvisited
    city, k from the request seed, so the candidates score differently and the run has a best."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        self.calls.append(len(conversations))
        return [Completion(text=PROGRAM.format(k=seed % 3), prompt_tokens=10, completion_tokens=20) for seed in seeds]


PROGRAM = """```python
import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    order = np.argsort(distance_matrix[current_node][unvisited_nodes], kind="stable")
    return unvisited_nodes[order[min({k}, len(order) - 1)]]
```"""


class Interrupting(TourEngine):
    """Ctrl-C at the run's fourth step: three steps are logged, the rest are not."""

    def chat(self, *args, **kwargs):
        if len(self.calls) == 3:
            raise KeyboardInterrupt
        return super().chat(*args, **kwargs)


def no_engine(*args, **kwargs):
    pytest.fail("an engine was built for a resume that is refused or only shown")


def config_file(folder: Path, budget: int) -> Path:
    path = folder / "c.toml"
    path.write_text(f'[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = {budget}\n'
                    '[sample]\nbatch = 3\n[sampling]\ntemperature = 0.7\n')
    return path


def finished_run(tmp_path: Path, monkeypatch) -> Path:
    """A finished run of three steps (nine candidates)."""
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: TourEngine())
    run = tmp_path / "r"
    assert main(["run", str(config_file(tmp_path, 9)), "--out", str(run), "--no-progress"]) == 0
    assert steps(run) == [0, 1, 2] and read_jsonl(run / "events.jsonl")[-1]["type"] == "end"
    return run


def killed_run(tmp_path: Path, monkeypatch) -> Path:
    """A run of four steps killed (Ctrl-C) in its fourth: steps 0, 1 and 2 are logged."""
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Interrupting())
    run = tmp_path / "r"
    assert main(["run", str(config_file(tmp_path, 12)), "--out", str(run), "--no-progress"]) == 130
    assert steps(run) == [0, 1, 2] and len(read_jsonl(run / "candidates.jsonl")) == 9
    return run


def steps(run: Path) -> list[int]:
    return [e["step"] for e in read_jsonl(run / "events.jsonl") if e.get("type") == "step"]


def step_line(run: Path, step: int) -> int:
    """The line of events.jsonl (from 1) that holds `step`."""
    lines = (run / "events.jsonl").read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if f'"step": {step},' in line and '"type": "step"' in line)


def drop_line(path: Path, number: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    del lines[number - 1]
    path.write_text("".join(lines))


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, byte for byte (the writer lock's record aside: it names the holder)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".writer.lock"}


def refused(capsys, monkeypatch, argv: list[str], folder: Path) -> str:
    """The one error line of `coevolve ARGV`: exit 2, no engine built, not a byte written under `folder`."""
    monkeypatch.setattr(pool, "build_engine", no_engine)
    capsys.readouterr()  # what ran before
    before = contents(folder)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert contents(folder) == before, "a refused resume wrote files"
    return err.strip()


def report(capsys, run: Path) -> str:
    """`coevolve report RUN` (exit 0): its report.md."""
    capsys.readouterr()
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    return (run / "report.md").read_text()


# -- (a) an emptied events.jsonl is not a run killed before its start event ------------------------------
def emptied(run: Path) -> str:
    return (f"{run / 'events.jsonl'} is empty while {run} holds 9 candidates (candidates.jsonl)")


def test_resume_refuses_an_emptied_log_of_a_run_that_wrote_steps(tmp_path, monkeypatch, capsys):
    run = killed_run(tmp_path, monkeypatch)
    (run / "events.jsonl").write_text("")
    line = refused(capsys, monkeypatch, ["run", "--resume", str(run), "--no-progress"], tmp_path)
    assert emptied(run) in line, line
    assert line.endswith(": the log was lost or truncated, and nothing can be replayed from it; put back its "
                         "events.jsonl from a copy, or start the run again with "
                         f"`coevolve run {run / 'config.toml'} --out NEW_DIR`"), line
    # --plan reads the same log: it plans nothing from it either
    assert emptied(run) in refused(capsys, monkeypatch, ["run", "--resume", str(run), "--plan"], tmp_path)


def test_report_of_an_emptied_log_says_so_not_that_the_run_is_unfinished(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    (run / "events.jsonl").write_text("")
    text = report(capsys, run)
    assert emptied(run) in text and "the log was lost or truncated" in text, text
    assert "not finished" not in text and "goes on past this summary" not in text, text


# -- (b) a step line deleted, or repeated: refused before anything is appended ------------------------------
def test_resume_refuses_a_log_missing_a_middle_step_before_appending(tmp_path, monkeypatch, capsys):
    run = killed_run(tmp_path, monkeypatch)
    line = step_line(run, 1)
    drop_line(run / "events.jsonl", line)
    message = refused(capsys, monkeypatch, ["run", "--resume", str(run), "--no-progress"], tmp_path)
    assert message.endswith(f"{run / 'events.jsonl'}: step 1 is missing (line {line} holds step 2): the log was "
                            "edited, and a run goes on only from the log it wrote; put back the missing line from a "
                            f"copy, or start the run again with `coevolve run {run / 'config.toml'} --out NEW_DIR`"), \
        message


def test_resume_refuses_a_repeated_step_line(tmp_path, monkeypatch, capsys):
    run = killed_run(tmp_path, monkeypatch)
    line = step_line(run, 1)
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    (run / "events.jsonl").write_text("".join(lines[:line] + [lines[line - 1]] + lines[line:]))
    message = refused(capsys, monkeypatch, ["run", "--resume", str(run), "--no-progress"], tmp_path)
    assert f"{run / 'events.jsonl'}: line {line + 1} holds step 1 again (line {line} holds it): the log was edited" \
        in message, message


def test_report_notes_a_log_missing_a_step(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    line = step_line(run, 1)
    drop_line(run / "events.jsonl", line)
    text = report(capsys, run)
    assert f"{run / 'events.jsonl'}: step 1 is missing (line {line} holds step 2): the log was edited" in text, text


# -- (c) a finished run's best.py deleted ------------------------------------------------------------------
def test_a_finished_runs_lost_best_py_is_named_by_report_and_written_again_by_resume(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    original = (run / "best.py").read_bytes()
    (run / "best.py").unlink()
    best = json.loads((run / "summary.json").read_text())["best"]
    assert best["id"] > 0, "the run's best is one of its candidates"
    text = report(capsys, run)
    assert "This run produced no valid heuristic" not in text, text
    assert f"{run / 'best.py'} is missing: summary.json names candidate {best['id']} (objective " in text, text
    assert f"the run's best; `coevolve run --resume {run}` writes it again" in text, text
    monkeypatch.setattr(pool, "build_engine", no_engine)
    capsys.readouterr()
    log = (run / "events.jsonl").read_bytes()
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert (f"{run / 'best.py'} was missing: written again from candidate {best['id']}'s code in candidates.jsonl"
            in out), out
    assert (run / "best.py").read_bytes() == original
    assert (run / "events.jsonl").read_bytes() == log
    assert "is missing" not in report(capsys, run)


# -- (d) a line deleted from a finished run's candidates.jsonl ----------------------------------------------
def test_report_notes_candidates_jsonl_that_disagrees_with_the_log(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    drop_line(run / "candidates.jsonl", 4)
    text = report(capsys, run)
    assert (f"{run / 'candidates.jsonl'} holds 8 candidates where the run's log holds 9: it was edited or damaged "
            "since the run wrote it") in text, text


def test_report_of_an_undamaged_finished_run_has_no_damage_note(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    text = report(capsys, run)
    assert "is missing" not in text and "where the run's log holds" not in text and "not finished" not in text
