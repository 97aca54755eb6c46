"""Damaged run directories as `coevolve report` and `coevolve run --resume` read them, beyond
tests/test_damaged_runs.py: a comparison arm whose candidates.jsonl disagrees with its log, a run whose
events.jsonl was deleted, a lost best.py whose code the run no longer holds, and line numbers in a log
with blank lines.

Real run directories, written by the real loop through the CLI with the fake engine (test_damaged_runs'
fixtures), and a comparison directory made by hand as tests/test_report.py makes one."""

from __future__ import annotations

import json
from pathlib import Path

from coevolve.cli import main
from coevolve.engine import pool
from coevolve.report import render_comparison
from coevolve.runstore import read_jsonl
from test_damaged_runs import drop_line, finished_run, no_engine, refused, report, step_line
import test_report

comparison = test_report.comparison  # a hand-made comparison of six finished runs (the fixture)


# -- a comparison arm whose candidates.jsonl disagrees with its log ---------------------------------------
def candidate(cid: int, failure: str | None) -> dict:
    return {"id": cid, "step": 0, "operator": "i1", "parents": [], "model_state": {"kind": "base"}, "code": "x",
            "objective": None if failure else 5.0, "failure": failure, "message": "NameError: name 'd'"}


def logged_arm(run: Path, records: list[dict]) -> None:
    """An arm run whose log's one step scored `records`, and whose candidates.jsonl holds them, as a run
    leaves them."""
    results = [{"id": r["id"], "objective": r["objective"], "failure": r["failure"]} for r in records]
    events = [{"type": "start"}, {"type": "step", "step": 0, "results": results}, {"type": "end", "evaluations": 10}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_comparison_notes_an_arm_run_whose_candidates_disagree_with_its_log(comparison):
    runs = comparison / "runs" / "tsp_construct"
    for arm in runs.iterdir():
        logged_arm(arm, [candidate(1, "exception"), candidate(2, "exception"), candidate(3, None)])
    damaged = runs / "sample-b10-s1" / "candidates.jsonl"
    drop_line(damaged, 1)  # a failed candidate gone: the arm's failure count is one short
    render_comparison(comparison)
    section = (comparison / "report.md").read_text().split("## Why candidates failed")[1].split("\n## ")[0]
    note = (f"{damaged} holds 2 candidates where the run's log holds 3: it was edited or damaged since the run "
            "wrote it, so what the report reads from it (the commonest failures) is not the run's")
    assert f"**{note}.**" in section, section
    assert section.count("edited or damaged") == 1, section  # the undamaged arms: no note
    saved = {f["method"]: f["damage"] for f in json.loads((comparison / "results.json").read_text())["failures"]}
    assert saved == {"sample": [note], "sample+esopt": []}


def test_a_comparison_notes_damage_even_where_no_candidate_is_left_failed(comparison):
    runs = comparison / "runs" / "tsp_construct"
    for arm in runs.iterdir():
        logged_arm(arm, [candidate(1, None)])
    lost = runs / "sample-b10-s0"
    logged_arm(lost, [candidate(1, "exception"), candidate(2, None)])
    drop_line(lost / "candidates.jsonl", 1)  # its only failure deleted: 0 failed everywhere
    render_comparison(comparison)
    text = (comparison / "report.md").read_text()
    assert "## Why candidates failed" in text and f"{lost / 'candidates.jsonl'} holds 1 candidate where" in text


# -- events.jsonl deleted, summary.json still there ------------------------------------------------------
def deleted(run: Path) -> str:
    return (f"{run / 'events.jsonl'} is missing while {run} holds 9 candidates (candidates.jsonl), prompts.jsonl, "
            f"population/, summary.json, "
            f"best.py: the run's log was deleted, and nothing can be replayed from it; put back its events.jsonl "
            f"from a copy, or start the run again with `coevolve run {run / 'config.toml'} --out NEW_DIR`")


def test_report_of_a_run_whose_log_was_deleted_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    (run / "events.jsonl").unlink()
    text = report(capsys, run)
    assert f"**{deleted(run)}. The table is the summary the run last wrote.**" in text, text
    assert "not finished" not in text and "goes on past this summary" not in text, text


def test_resume_of_a_run_whose_log_was_deleted_is_refused_before_anything_loads(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    (run / "events.jsonl").unlink()
    for argv in (["run", "--resume", str(run), "--no-progress"], ["run", "--resume", str(run), "--plan"],
                 ["run", "--resume", str(run), "--budget", "12", "--no-progress"]):
        line = refused(capsys, monkeypatch, argv, tmp_path)
        assert line == f"coevolve run: error: {deleted(run)}", line
    assert not (run / "events.jsonl").exists()


# -- a lost best.py: "--resume writes it again" only where it can --------------------------------------------
def test_report_of_a_lost_best_py_whose_code_left_candidates_jsonl_says_the_log_writes_both_again(
        tmp_path, monkeypatch, capsys):
    """A run without ES replays its log with no engine (loop.rebuild_derived): a candidates.jsonl that lost the
    best's line is written again from the log, and best.py from it; the report says so, and the resume does it."""
    run = finished_run(tmp_path, monkeypatch)
    (run / "best.py").unlink()
    best = json.loads((run / "summary.json").read_text())["best"]
    lines = (run / "candidates.jsonl").read_bytes()
    ids = [c["id"] for c in read_jsonl(run / "candidates.jsonl")]
    drop_line(run / "candidates.jsonl", ids.index(best["id"]) + 1)
    text = report(capsys, run)
    assert (f"{run / 'best.py'} is missing: summary.json names candidate {best['id']} (objective "
            f"{best['objective']:.6g}, step {best['step']}) the run's best, and candidates.jsonl lost its code; "
            f"`coevolve run --resume {run}` writes both again from the run's log") in text, text
    assert "cannot write it again" not in text, text
    monkeypatch.setattr(pool, "build_engine", no_engine)
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "written again from its log" in out and (run / "best.py").exists(), out
    assert (run / "candidates.jsonl").read_bytes() == lines


# -- line numbers are the file's, blank lines counted ---------------------------------------------------------
def test_a_damaged_logs_line_numbers_count_its_blank_lines(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path, monkeypatch)
    drop_line(run / "events.jsonl", step_line(run, 1))
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    (run / "events.jsonl").write_text("".join(lines[:1] + ["\n", "  \n"] + lines[1:]))  # as an editor may leave
    line = step_line(run, 2)
    said = f"{run / 'events.jsonl'}: step 1 is missing (line {line} holds step 2): the log was edited"
    assert said in report(capsys, run)
    assert said in refused(capsys, monkeypatch, ["run", "--resume", str(run), "--budget", "12", "--no-progress"],
                           tmp_path)
