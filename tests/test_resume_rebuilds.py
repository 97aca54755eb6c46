"""`coevolve run --resume` of run directories damaged after the run wrote them (kill/resume sweep,
findings 2 and 5): a damaged clock.json (the wall seconds of earlier sessions, for caps.wall_s) is one
line saying what it holds and how to go on, not a traceback; a finished run's lost candidates.jsonl,
population snapshots or genealogy.json are written again from its log, the bytes the run wrote, and
one note line says so. The real CLI, the stub endpoint (tests/endpoint_stub.py) and the real sandbox
on tsp_construct; no engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import endpoint_stub
from endpoint_stub import MODEL

from coevolve.cli import main
from coevolve.runstore import read_jsonl

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest


def write_config(tmp_path: Path, base_url: str, caps: str = "") -> Path:
    # fingerprint off: the stub answers the template every time, and the run keeps those candidates
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 16\nseed = 0\n'
                    f'[sandbox]\ntimeout_s = 10\n[context]\nconstrain = false\nfingerprint = false\n'
                    f'[endpoint]\nbase_url = "{base_url}"\nmodel = "{MODEL}"\nretries = 1\n{caps}')
    return path


def finished(stub, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    assert main(["run", str(write_config(tmp_path, stub.base_url)), "--out", str(run), "--no-progress"]) == 0
    assert read_jsonl(run / "events.jsonl")[-1]["type"] == "end"
    return run


def derived(run: Path) -> dict[str, bytes]:
    """The files a run derives from its log, by path under the run directory."""
    paths = [run / "candidates.jsonl", run / "genealogy.json", *sorted((run / "population").glob("*.json"))]
    return {str(p.relative_to(run)): p.read_bytes() for p in paths}


def resumed(capsys, run: Path) -> str:
    capsys.readouterr()
    code = main(["run", "--resume", str(run), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    return out


def test_a_finished_runs_lost_derived_files_are_written_again_by_resume(stub, tmp_path, capsys):
    run = finished(stub, tmp_path)
    wrote, log, asked = derived(run), (run / "events.jsonl").read_bytes(), stub.chats
    assert len(wrote) >= 4 and len(read_jsonl(run / "candidates.jsonl")) == 16
    (run / "candidates.jsonl").unlink()
    (run / "genealogy.json").unlink()
    shutil.rmtree(run / "population")
    out = resumed(capsys, run)
    assert "has finished: nothing to resume" in out, out
    lines = [line for line in out.splitlines() if "written again from its log" in line]
    assert lines == [f"candidates.jsonl, genealogy.json, population/gen_0000.json and {len(wrote) - 3} more of "
                     f"{run} were missing or incomplete: written again from its log"], out
    assert derived(run) == wrote
    assert (run / "events.jsonl").read_bytes() == log
    assert stub.chats == asked  # replayed from the log: nothing asked again
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"] is not None
    assert "written again" not in resumed(capsys, run)  # nothing left to rebuild


def test_a_finished_runs_truncated_candidates_are_written_again_with_its_best(stub, tmp_path, capsys):
    run = finished(stub, tmp_path)
    wrote, best = derived(run), (run / "best.py").read_bytes()
    lines = (run / "candidates.jsonl").read_bytes().splitlines(keepends=True)
    (run / "candidates.jsonl").write_bytes(b"".join(lines[:3]))
    (run / "best.py").unlink()
    out = resumed(capsys, run)
    assert f"candidates.jsonl of {run} was missing or incomplete: written again from its log" in out, out
    assert f"{run / 'best.py'} was missing: written again from" in out, out
    assert derived(run) == wrote and (run / "best.py").read_bytes() == best


def test_a_damaged_clock_json_stops_a_resume_in_one_line_and_deleting_it_goes_on(stub, tmp_path, capsys):
    run = tmp_path / "run"
    # a cap stops the run after its first step: its resume goes on into the loop, which reads clock.json
    config = write_config(tmp_path, stub.base_url, "[caps]\ncompletion_tokens = 1\n")
    assert main(["run", str(config), "--out", str(run), "--no-progress"]) == 0
    (run / "clock.json").write_text("{oops")
    log = (run / "events.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("coevolve run: error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"coevolve run: error: {run / 'clock.json'} is not valid JSON ("), err
    assert errors[0].endswith("it holds only the wall-clock seconds of the run's earlier sessions, which caps.wall_s "
                              "counts; delete it and resume again to go on (those seconds then count as 0)"), err
    assert (run / "events.jsonl").read_bytes() == log  # refused before anything was written
    (run / "clock.json").unlink()
    resumed(capsys, run)
