"""The dashboard's reader and API without a browser: bad input, torn lines,
read-only access, a port in use, a missing extra, and a 10,000-candidate run
answered from parsed files, in bounded pages. (The pages themselves: tests/test_dashboard_browser.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coevolve.base.errors import CorruptFileError, UsageError
from coevolve.dashboard import reader
from conftest import ROOT
from test_run_lock import SINCE, start_holder, stop

COMPARISON = ROOT / "benchmarks" / "results" / "pipeline_check_eoh_esopt_tsp"
CODE = "import numpy as np\n\ndef select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"


def candidate(cid: int, step: int, parents: list[int], objective: float | None, failure: str | None = None) -> dict:
    return {"id": cid, "step": step, "operator": "i1" if not parents else "e1", "parents": parents,
            "model_state": {"kind": "base"}, "code": CODE + f"    return unvisited_nodes[{cid % 7}]  # {'x' * 800}\n",
            "idea": f"idea {cid}", "objective": objective, "failure": failure,
            "message": "" if failure is None else f"boom {cid}", "seconds": 0.01, "duplicate_of": None, "reward": None}


def make_run(path: Path, records: list[dict], tail: str = "", end: bool = False) -> Path:
    path.mkdir(parents=True)
    (path / "config.toml").write_text('[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 20\nseed = 3\n'
                                      '[sandbox]\ntimeout_s = 9\n')
    (path / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    events = [{"type": "start", "version": 1}] + ([{"type": "end", "evaluations": len(records)}] if end else [])
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def client(*dirs: Path, stale_after: float = 600.0):
    from starlette.testclient import TestClient

    from coevolve.dashboard.app import create_app

    return TestClient(create_app(reader.Registry.open([str(d) for d in dirs], stale_after=stale_after)))


def test_a_directory_that_is_no_run_is_refused_with_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not a run directory .*no config.toml.*not a comparison"):
        reader.Registry.open([tmp_path / "empty"])
    with pytest.raises(UsageError, match="no such directory"):
        reader.Registry.open([tmp_path / "missing"])
    done = subprocess.run([sys.executable, "-m", "coevolve.cli", "dashboard", str(tmp_path / "empty"), "--port", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "not a run directory" in done.stderr
    # no folder given and no runs/ where runs go by default: what to do, not "runs: no such directory"
    default = subprocess.run([sys.executable, "-m", "coevolve.cli", "dashboard", "--port", "0"],
                             cwd=tmp_path / "empty", capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert default.returncode == 2 and default.stderr.strip().count("\n") == 0, default.stderr
    assert f"no runs/ folder in {tmp_path / 'empty'}" in default.stderr and "coevolve run examples/" in default.stderr


def test_a_port_in_use_is_named(tmp_path):
    from coevolve.dashboard.app import bind

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is in use"):
            bind("127.0.0.1", port)
    finally:
        taken.close()


def test_a_missing_extra_is_named(tmp_path, monkeypatch):
    from coevolve.dashboard import app

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now raises ImportError
    registry = reader.Registry.open([make_run(tmp_path / "r", [candidate(1, 0, [], 5.0)])])
    with pytest.raises(UsageError, match=r"needs uvicorn.*pip install 'coevolve\[dashboard\]'"):
        app.serve(registry, "127.0.0.1", 0)


def test_a_torn_last_line_is_left_out_and_nothing_is_written(tmp_path):
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0), candidate(2, 1, [1], None, "exception")],
                   tail='{"id": 3, "step": 1, "par')
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir()}
    with client(run) as http:
        page = http.get("/api/run/run/candidates").json()
        assert page["total"] == 2 and [r["id"] for r in page["rows"]] == [1, 2]
        detail = http.get("/api/run/run/candidate/2").json()
        assert detail["message"] == "boom 2" and detail["diffs"][0]["parent"] == 1
        assert http.get("/api/run/run").json()["state"] == "running"
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir()}
    assert after == before  # reading never repairs, rewrites or adds a file


def test_a_candidates_note_is_in_its_detail_cleaned(tmp_path):
    noted = {**candidate(1, 0, [], 7.0), "feedback": "bins over the bound: 5, 4\x1b[2J", "skill_version": 2}
    run = make_run(tmp_path / "run", [noted, candidate(2, 1, [1], 6.0)])
    with client(run) as http:
        first, second = (http.get(f"/api/run/run/candidate/{i}").json() for i in (1, 2))
        assert first["feedback"] == "bins over the bound: 5, 4" and first["skill_version"] == 2
        assert second["feedback"] == "" and second["skill_version"] is None  # a line without the keys


def test_the_skill_the_prompts_showed_is_read_from_the_log_as_it_grows(tmp_path):
    """A +trace2skill run with skill.keep = "judged" (its files written by hand): a skill.start text, a
    refresh's version and trial, the seeded template as a parent; and a run with no skill."""
    lines = [{**candidate(1, 0, [], 7.0), "skill_version": 0},  # no parent: scored is a success
             candidate(2, 0, [], None, "exception"),
             {**candidate(3, 2, [0], 6.0), "skill_version": 1},  # beat the seeded template (6.5)
             {**candidate(4, 2, [1], 8.0), "skill_version": 1}]  # worse than its parent
    run = make_run(tmp_path / "run", lines)
    trial = {"step": 2, "since": 0, "incumbent": None, "challenger": 0, "kept": 0, "distinct": False,
             "interval": [-0.4, 0.9], "children": {"challenger": {"candidates": 1, "valid": 1, "improved": 1},
                                                   "incumbent": {"candidates": 1, "valid": 0, "improved": 0}}}
    with open(run / "events.jsonl", "a") as handle:
        for e in ({"type": "skill_start", "source": "/x", "text": "# Hints\n- keep it short\x1b[2J"},
                  {"type": "seed", "id": 0, "result": {"objective": 6.5}},
                  {"type": "step", "step": 0, "operator": "i1", "requests": [{"slot": 0, "skill": 0},
                                                                             {"slot": 1, "skill": None}]},
                  {"type": "step", "step": 2, "operator": "distill", "skill": {"version": 1, "step": 2, "text": "v1"},
                   "trial": trial}):
            handle.write(json.dumps(e) + "\n")
    plain = make_run(tmp_path / "plain", [candidate(1, 0, [], 7.0)])
    with client(run, plain) as http:
        skills = http.get("/api/run/run").json()["skills"]
        assert [(v["label"], v["step"], v["text"]) for v in skills["versions"]] == [
            ("v000", None, "# Hints\n- keep it short"), ("v001", 2, "v1")]
        assert skills["shown"] == [
            {"version": 0, "label": "v000", "candidates": 1, "valid": 1, "improved": 1},
            {"version": None, "label": "no skill", "candidates": 1, "valid": 0, "improved": 0},
            {"version": 1, "label": "v001", "candidates": 2, "valid": 2, "improved": 1}]
        assert skills["trials"] == ["v000 kept over no skill at step 2: v000 improved 1/1 (valid 1); no skill "
                                    "improved 0/1 (valid 0); could not be told apart"]
        assert http.get("/api/run/plain").json()["skills"] == {"versions": [], "shown": [], "trials": []}
    # a run written before its log named each request's version: its versions, but no counts by version
    events = (run / "events.jsonl").read_text().splitlines()
    (run / "events.jsonl").write_text("\n".join(e for e in events if '"operator": "i1"' not in e) + "\n")
    with client(run) as http:
        skills = http.get("/api/run/run").json()["skills"]
        assert len(skills["versions"]) == 2 and skills["shown"] == []


def test_a_run_says_how_many_of_its_valid_candidates_are_programs_of_their_own(tmp_path):
    repeat = {**candidate(3, 1, [1], 7.0), "duplicate_of": 1}  # the same code as 1: valid as 1 was
    failed_repeat = {**candidate(4, 1, [1], None, "exception"), "duplicate_of": 2}
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0), candidate(2, 0, [], None, "exception"), repeat,
                                      failed_repeat, candidate(5, 1, [1], 6.5)])
    with client(run) as http:
        row = http.get("/api/run/run").json()
    assert (row["valid"], row["distinct_valid"], row["valid_rate"]) == (3, 2, 3 / 5)


def test_a_judged_runs_open_trial_is_shown_while_it_runs(tmp_path):
    """skill.keep = "judged", no summary yet: the trial the last refresh opened (v001 against v000, the
    version that refresh kept) is judged as it stands over the children proposed after that refresh."""
    lines = [{**candidate(1, 0, [], 7.0), "skill_version": 0}, candidate(2, 0, [], None, "exception"),
             {**candidate(3, 3, [0], 6.0), "skill_version": 1},  # beat the seeded template (6.5)
             {**candidate(4, 3, [1], 8.0), "skill_version": 0},  # worse than its parent
             {**candidate(5, 3, [3], None, "syntax"), "skill_version": 1}]
    run = make_run(tmp_path / "run", lines)
    with open(run / "config.toml", "a") as handle:
        handle.write('[skill]\nkeep = "judged"\n')
    first = {"step": 2, "since": -1, "incumbent": None, "challenger": 0, "kept": 0, "distinct": False,
             "interval": [-0.4, 0.9], "children": {"challenger": {"candidates": 1, "valid": 1, "improved": 1},
                                                   "incumbent": {"candidates": 1, "valid": 0, "improved": 0}}}
    with open(run / "events.jsonl", "a") as handle:
        for e in ({"type": "skill_start", "source": "/x", "text": "# Hints"},
                  {"type": "seed", "id": 0, "result": {"objective": 6.5}},
                  {"type": "step", "step": 0, "operator": "i1", "requests": [{"slot": 0, "skill": 0}]},
                  {"type": "step", "step": 2, "operator": "distill", "skill": {"version": 1, "step": 2, "text": "v1"},
                   "trial": first}):
            handle.write(json.dumps(e) + "\n")
    with client(run) as http:
        trials = http.get("/api/run/run").json()["skills"]["trials"]
    assert trials == ["v000 kept over no skill at step 2: v000 improved 1/1 (valid 1); no skill improved 0/1 "
                      "(valid 0); could not be told apart",
                      "v001 on trial, v001 ahead so far (running): v001 improved 1/2 (valid 1); v000 improved 0/1 "
                      "(valid 1); could not be told apart"]
    # skill.keep = "latest": a new version replaces the last, nothing is on trial
    config = (run / "config.toml").read_text()
    (run / "config.toml").write_text(config.replace('keep = "judged"', 'keep = "latest"'))
    with client(run) as http:
        assert len(http.get("/api/run/run").json()["skills"]["trials"]) == 1


def test_a_candidates_reply_is_its_step_events_completion_for_its_slot(tmp_path):
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0), candidate(2, 0, [], None, "parse"),
                                      candidate(3, 1, [1], 6.0)])
    with open(run / "events.jsonl", "a") as handle:
        handle.write(json.dumps({"type": "step", "step": 0, "completions": [{"text": "{a}"}, {"text": "no code\x1b[2J"}]})
                     + "\n")
    with client(run) as http:
        assert http.get("/api/run/run/candidate/1").json()["reply"] == "{a}"
        assert http.get("/api/run/run/candidate/2").json()["reply"] == "no code"  # cleaned of escapes
        assert http.get("/api/run/run/candidate/3").json()["reply"] is None  # its step is not logged yet


def test_a_candidates_prompt_is_the_last_record_of_its_slot_found_by_digest(tmp_path):
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0), candidate(2, 0, [], None, "parse"),
                                      candidate(3, 1, [1], 6.0)])
    sent = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write it\x1b[2J"}]
    again = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "again"}]
    with open(run / "prompts.jsonl", "w") as handle:
        for record in ({"step": 0, "slot": 0, "sha256": "a", "messages": sent}, {"step": 0, "slot": 1, "sha256": "a"},
                       {"step": 0, "slot": 1, "sha256": "b", "messages": again}):  # slot 1 asked again on resume
            handle.write(json.dumps(record) + "\n")
    with client(run) as http:
        assert http.get("/api/run/run/candidate/1").json()["prompt"] == [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "write it"}]  # cleaned
        assert http.get("/api/run/run/candidate/2").json()["prompt"][1]["content"] == "again"
        assert http.get("/api/run/run/candidate/3").json()["prompt"] is None  # not written yet


def test_a_seeded_parent_opens_with_its_code_and_its_child_shows_the_diff(tmp_path):
    """The template (candidate 0) and a [start] program (-1) are not in candidates.jsonl: they are read
    from the seed events, so a parent link to them opens, and a child's diff against them is shown."""
    from tasks.registry import get_task

    child = {**candidate(1, 0, [-1], 6.0), "code": "def select_next_node(a, b, c, d):\n    return c[1]\n"}
    run = make_run(tmp_path / "run", [child])
    mine = "def select_next_node(a, b, c, d):\n    return c[0]\n"
    with open(run / "events.jsonl", "a") as handle:
        for e in ({"type": "seed", "id": 0, "result": {"objective": 7.0}},
                  {"type": "seed", "id": -1, "path": "/x/mine.py", "code": mine, "result": {"objective": 6.5}}):
            handle.write(json.dumps(e) + "\n")
    with client(run) as http:
        start = http.get("/api/run/run/candidate/-1").json()
        assert start["code"] == mine and start["objective"] == 6.5 and start["children"] == [1]
        assert start["idea"] == "starting program /x/mine.py" and start["prompt"] is None and start["reply"] is None
        template = http.get("/api/run/run/candidate/0").json()
        assert template["code"] == get_task("tsp_construct").template and template["operator"] == "template"
        (diff,) = http.get("/api/run/run/candidate/1").json()["diffs"]
        assert diff["parent"] == -1 and "-    return c[0]" in diff["lines"] and "+    return c[1]" in diff["lines"]
        assert http.get("/api/run/run/candidate/x").status_code == 404


def seed_events(run: Path) -> None:
    """The template (0, scored 7.0), a [start] program (-1, 6.5) and one that failed (-2), as the loop logs them."""
    with open(run / "events.jsonl", "a") as handle:
        for e in ({"type": "seed", "id": 0, "result": {"objective": 7.0}},
                  {"type": "seed", "id": -1, "path": "/x/mine.py", "code": "def select_next_node(a, b, c, d):\n"
                   "    return c[0]\n", "result": {"objective": 6.5}},
                  {"type": "seed", "id": -2, "path": "/x/bad.py", "code": "def select_next_node(a, b, c, d):\n"
                   "    return d[9]\n",
                   "result": {"objective": None, "failure": "exception", "message": "IndexError"}}):
            handle.write(json.dumps(e) + "\n")


def test_seeded_programs_are_rows_of_the_table_and_roots_of_the_tree(tmp_path):
    """[start] programs and the seeded template are listed and drawn (opened by a click, not only through a
    child's parent link), marked seeded; the run's proposal statistics stay those of its proposals."""
    records = [candidate(1, 0, [-1], 6.0), candidate(2, 0, [0], None, "exception"), candidate(3, 1, [1], 5.5)]
    seeded, plain = make_run(tmp_path / "seeded", records), make_run(tmp_path / "plain", records)
    seed_events(seeded)
    with client(seeded, plain) as http:
        rows = {r["name"]: r for r in http.get("/api/runs").json()["runs"]}
        mine, theirs = http.get("/api/run/seeded").json(), http.get("/api/run/plain").json()
        page = http.get("/api/run/seeded/candidates").json()
        only = http.get("/api/run/seeded/candidates?outcome=seeded").json()
        valid = http.get("/api/run/seeded/candidates?outcome=valid").json()
        best_first = http.get("/api/run/seeded/candidates?order=rank").json()
        tree = http.get("/api/run/seeded/tree").json()
        lineage = http.get("/api/run/seeded/tree?mode=lineage").json()
        old_page, old_tree = http.get("/api/run/plain/candidates").json(), http.get("/api/run/plain/tree").json()
        start = http.get("/api/run/seeded/candidate/-1").json()
    identity = ("id", "label", "name")
    assert ({k: v for k, v in rows["seeded"].items() if k not in identity}
            == {k: v for k, v in rows["plain"].items() if k not in identity})
    assert (mine["used"], mine["valid_rate"], mine["best_id"], mine["curves"]) == (
        3, 2 / 3, 3, theirs["curves"])
    assert (mine["seeded"], theirs["seeded"]) == (3, 0)
    # the table: the seeded programs first (scored before step 0), outcome "seeded", no rank
    assert [r["id"] for r in page["rows"]] == [0, -1, -2, 1, 2, 3] and page["total"] == 6
    assert [(r["outcome"], r["objective"], r["rank"], r["model"]) for r in page["rows"][:3]] == [
        ("seeded", 7.0, None, "template"), ("seeded", 6.5, None, "start"), ("seeded", None, None, "start")]
    assert page["rows"][1]["idea"] == "starting program /x/mine.py"
    assert [r["id"] for r in only["rows"]] == [0, -1, -2] and [r["id"] for r in valid["rows"]] == [1, 3]
    assert [r["id"] for r in best_first["rows"]] == [3, 1, -2, -1, 0, 2]  # unranked last, by id
    # the tree: the seeded programs as roots their children link to
    nodes = {n["id"]: n for n in tree["nodes"]}
    assert sorted(nodes) == [-2, -1, 0, 1, 2, 3] and (tree["total"], tree["seeded"]) == (3, 3)
    assert nodes[-1]["outcome"] == "seeded" and nodes[-1]["step"] == -1 and nodes[-1]["parents"] == []
    assert nodes[1]["parents"] == [-1] and nodes[2]["parents"] == [0]
    assert sorted(n["id"] for n in lineage["nodes"]) == [-1, 1, 3]  # the best and its ancestors, the seed among them
    assert start["outcome"] == "seeded" and start["children"] == [1]
    # a run directory from before seed events: only its proposals, as before
    assert [r["id"] for r in old_page["rows"]] == [1, 2, 3] and old_page["total"] == 3
    assert [n["id"] for n in old_tree["nodes"]] == [1, 2, 3] and old_tree["seeded"] == 0


def test_the_tree_keeps_its_seeded_roots_when_it_is_cut_to_its_limit(tmp_path):
    records = [candidate(cid, cid, [cid - 1] if cid > 1 else [-1], 10.0 - cid / 100) for cid in range(1, 8)]
    run = make_run(tmp_path / "run", records)
    seed_events(run)
    tree = reader.HeuristicRun(run).tree("all", limit=5)
    assert [n["id"] for n in tree["nodes"]] == [0, -1, -2, 6, 7]  # the roots, then the latest proposals


def test_commonest_failures_are_counted_once_per_change_of_the_candidates(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run", [candidate(1, 0, [], None, "exception"), candidate(2, 0, [], 7.0)])
    counted: list[int] = []
    count = reader.failure_causes
    monkeypatch.setattr(reader, "failure_causes", lambda cands: counted.append(len(cands)) or count(cands))
    with client(run) as http:
        for _ in range(3):  # the page polls
            assert http.get("/api/run/run").json()["failure_causes"] == [{"cause": "boom 1", "count": 1}]
        assert counted == [2]
        with open(run / "candidates.jsonl", "a") as handle:
            handle.write(json.dumps(candidate(3, 1, [2], None, "exception")) + "\n")
        assert http.get("/api/run/run").json()["failure_causes"] == [{"cause": "boom 1", "count": 2}]
        http.get("/api/run/run")
    assert counted == [2, 3]


def forget_built_tasks() -> None:
    """Empty every memo of the reader's, so what the test counts are the builds it causes."""
    for memo in vars(reader).values():
        if hasattr(memo, "cache_clear"):
            memo.cache_clear()


def test_a_task_is_built_once_per_name_and_a_gone_task_file_is_said(tmp_path, monkeypatch):
    """The runs list (direction, reference), the run page and the seeded template's code share one build of
    the task; a run whose task file is gone still shows, and its template says why it cannot be shown."""
    built: list[str] = []
    build = reader.heuristic_task
    monkeypatch.setattr(reader, "heuristic_task", lambda name: built.append(name) or build(name))
    monkeypatch.setattr(reader, "_REFERENCES", {})
    forget_built_tasks()
    run = make_run(tmp_path / "run", [candidate(1, 0, [0], 6.0)])
    seed_events(run)
    gone = make_run(tmp_path / "gone", [candidate(1, 0, [0], 6.0)])
    seed_events(gone)
    missing = str(tmp_path / "gone.py")
    (gone / "config.toml").write_text((gone / "config.toml").read_text().replace('"tsp_construct"', repr(missing)))
    try:
        with client(run, gone) as http:
            for _ in range(2):
                rows = {r["name"]: r for r in http.get("/api/runs").json()["runs"]}
                http.get("/api/run/run"), http.get("/api/run/run/candidates"), http.get("/api/run/run/tree")
                template = http.get("/api/run/run/candidate/0").json()
                lost, listed = http.get("/api/run/gone/candidate/0").json(), http.get("/api/run/gone/candidates").json()
        assert sorted(built) == sorted(["tsp_construct", missing])
        assert rows["run"]["gap"] is not None and template["code"].startswith("import")  # the task, built
        assert rows["gone"]["state"] != "unreadable" and rows["gone"]["gap"] is None and listed["total"] == 4
        assert lost["code"] is None
        assert lost["idea"] == f"the task's template (cannot be shown: task file not found: {missing})"
    finally:
        forget_built_tasks()  # the next test builds with the real registry


def test_damage_before_the_last_line_is_a_message_not_a_crash(tmp_path):
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0)])
    with open(run / "candidates.jsonl", "a") as handle:
        handle.write("not json\n" + json.dumps(candidate(2, 0, [], 6.0)) + "\n")
    with client(run) as http:
        answer = http.get("/api/run/run")
        assert answer.status_code == 422 and "line 2 is not valid JSON" in answer.json()["error"]
        rows = http.get("/api/runs").json()["runs"]
        assert rows[0]["state"] == "unreadable" and "line 2" in rows[0]["error"]
    # a complete line of the wrong shape (a list, not a record): a message too
    (run / "candidates.jsonl").write_text('[1, 2]\n')
    with client(run) as http:
        answer = http.get("/api/run/run")
        assert answer.status_code == 422 and "unexpected file content" in answer.json()["error"]
        assert http.get("/api/runs").json()["runs"][0]["state"] == "unreadable"


# a run's config.toml broken as a hand edit or a bad copy breaks it, and what its unreadable row names
BROKEN_CONFIGS = {
    "syntax": ('[run\nmethod = "eoh"\n', "not valid TOML", "line 1"),
    "type": ('[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = "twenty"\nseed = 3\n', "run.budget",
             "valid integer"),
    "table": ('run = 5\n[sandbox]\ntimeout_s = 9\n', "not a valid RunConfigFile: run", "dictionary"),
}


def broken_runs(root: Path) -> Path:
    """A folder of one good run and one run per way of BROKEN_CONFIGS, each otherwise whole."""
    make_run(root / "good", [candidate(1, 0, [], 7.0)])
    for name, (config, _, _) in BROKEN_CONFIGS.items():
        make_run(root / name, [candidate(1, 0, [], 6.0)])
        (root / name / "config.toml").write_text(config)
    return root


def assert_unreadable(row: dict, name: str, root: Path) -> None:
    _, what, where = BROKEN_CONFIGS[name]
    assert row["state"] == "unreadable", row
    assert str(root / name / "config.toml") in row["error"] and what in row["error"] and where in row["error"], row


def test_a_run_whose_config_is_broken_is_listed_unreadable_and_the_others_are_read(tmp_path):
    """Walkthrough s53, finding 9: a config.toml that is not TOML, or holds a value the dashboard shows of
    the wrong type, makes that run unreadable (file, line or field), not the folder; a section this
    version does not know is no damage (another version's config): the run is read as ever."""
    root = broken_runs(tmp_path / "runs")
    (root / "unknown").mkdir()
    (root / "unknown" / "config.toml").write_text((root / "good" / "config.toml").read_text() + "[newer]\nx = 1\n")
    for name in ("candidates.jsonl", "events.jsonl"):
        (root / "unknown" / name).write_bytes((root / "good" / name).read_bytes())
    registry = reader.Registry.open([root])
    assert sorted(registry.entries) == ["good", "syntax", "table", "type", "unknown"]
    rows = {e.id: reader.summarise(e, 600.0) for e in registry.entries.values()}
    for name in BROKEN_CONFIGS:
        assert_unreadable(rows[name], name, root)
        with pytest.raises(CorruptFileError, match="config.toml"):
            reader.HeuristicRun(root / name)
    assert rows["good"]["state"] != "unreadable" and rows["good"]["best"] == 7.0
    assert rows["unknown"]["state"] != "unreadable" and rows["unknown"]["budget"] == 20

    from coevolve.dashboard.app import found
    assert found(registry) == "5 runs under 1 directory"  # counted as runs, as a run with a damaged log is


def test_a_broken_run_config_leaves_the_dashboard_serving_the_others(tmp_path):
    """At start and when a run's config breaks while served: the runs list and the other runs' pages are
    served, the broken run's row and page name its config.toml; mended, it is read again."""
    root = broken_runs(tmp_path / "runs")
    with client(root) as http:
        listed = http.get("/api/runs")
        assert listed.status_code == 200
        rows = {r["id"]: r for r in listed.json()["runs"]}
        assert sorted(rows) == ["good", "syntax", "table", "type"]
        good = http.get("/api/run/good")
        assert good.status_code == 200 and good.json()["best"] == 7.0
        for name in BROKEN_CONFIGS:
            assert_unreadable(rows[name], name, root)
            page = http.get(f"/api/run/{name}")
            assert page.status_code == 422 and str(root / name / "config.toml") in page.json()["error"]
        # the good run's config broken while served: it turns unreadable, the list and the others stay
        config = root / "good" / "config.toml"
        written = config.read_text()
        config.write_text(written + "[[[\n")
        listed = http.get("/api/runs")
        assert listed.status_code == 200
        rows = {r["id"]: r for r in listed.json()["runs"]}
        assert rows["good"]["state"] == "unreadable" and str(config) in rows["good"]["error"]
        assert "line 8" in rows["good"]["error"] and http.get("/api/run/good").status_code == 422
        config.write_text(written)  # mended
        assert http.get("/api/run/good").json()["best"] == 7.0
        assert http.get("/api/runs").json()["runs"][0]["state"] != "unreadable"


def test_an_agent_run_with_a_broken_config_keeps_its_kind_and_is_told_by_it_once_mended(tmp_path):
    """A config.toml that cannot be read tells no [agent]: an agent run listed before it broke stays an
    agent run (its page says why it is unreadable, not "is a heuristic run"); one found broken is taken
    for a heuristic run until its config is mended, then its pages are the agent ones."""
    listed = make_agent_run(tmp_path / "runs" / "listed")
    with client(tmp_path / "runs") as http:
        config = listed / "config.toml"
        written = config.read_text()
        config.write_text("[run\n")
        row = http.get("/api/runs").json()["runs"][0]
        assert (row["kind"], row["state"]) == ("agent", "unreadable") and str(config) in row["error"]
        page = http.get("/api/agent/listed")
        assert page.status_code == 422 and str(config) in page.json()["error"]
        config.write_text(written)
        assert http.get("/api/agent/listed").status_code == 200
    found_broken = make_agent_run(tmp_path / "more" / "found")
    (found_broken / "config.toml").write_text(written + "[[[\n")
    with client(tmp_path / "more") as http:
        row = http.get("/api/runs").json()["runs"][0]
        assert (row["kind"], row["state"]) == ("run", "unreadable") and "line 9" in row["error"]
        (found_broken / "config.toml").write_text(written)
        row = http.get("/api/runs").json()["runs"][0]
        assert row["kind"] == "agent" and row["state"] != "unreadable"
        assert http.get("/api/agent/found").json()["row"]["used"] == 4
    # a value of the wrong type leaves the TOML readable: its [agent] tells the kind, the field why unreadable
    config.write_text(written.replace("budget = 16", 'budget = "16"'))
    row = reader.summarise(reader.Registry.open([listed]).entries["listed"], 600.0)
    assert (row["kind"], row["state"]) == ("agent", "unreadable") and "run.budget" in row["error"]


@pytest.mark.parametrize("config, what", [
    ('[compare\nmethods = ["eoh"]\n', "not valid TOML"),
    ('[compare]\nmethods = ["eoh"]\nbudgets = [20]\nseeds = [3]\n[bogus]\nx = 1\n', "bogus"),
    ('[compare]\nmethods = ["eoh"]\nbudgets = "twenty"\nseeds = [3]\n', "compare.budgets"),
])
def test_a_comparison_whose_compare_toml_is_broken_is_unreadable_and_its_runs_are_served(tmp_path, config, what):
    """A comparison's compare.toml broken as a run's config.toml may be: the comparison is listed unreadable
    naming it, its page says why, and its arm runs are listed and served."""
    root = tmp_path / "cmp"
    make_run(root / "runs" / "tsp_construct" / "eoh-b20-s3", [candidate(1, 0, [], 7.0)])
    (root / "compare.toml").write_text(config)
    arm = "cmp~runs~tsp_construct~eoh-b20-s3"
    with client(root) as http:
        rows = {r["id"]: r for r in http.get("/api/runs").json()["runs"]}
        assert rows["cmp"]["state"] == "unreadable" and str(root / "compare.toml") in rows["cmp"]["error"]
        assert what in rows["cmp"]["error"], rows["cmp"]
        page = http.get("/api/compare/cmp")
        assert page.status_code == 422 and str(root / "compare.toml") in page.json()["error"]
        assert rows[arm]["state"] != "unreadable" and http.get(f"/api/run/{arm}").json()["best"] == 7.0


def test_state_finished_running_stopped(tmp_path):
    done = make_run(tmp_path / "done", [candidate(1, 0, [], 7.0)], end=True)
    killed = make_run(tmp_path / "killed", [candidate(1, 0, [], 7.0)])
    old = time.time() - 3600
    for p in killed.iterdir():
        os.utime(p, (old, old))
    assert reader.HeuristicRun(done).state == "finished"
    assert reader.HeuristicRun(killed, stale_after=600).state == "stopped"
    assert reader.HeuristicRun(killed, stale_after=7200).state == "running"
    # a [caps] limit ended it: said so, with the cap, and the limits it was given shown
    capped = make_run(tmp_path / "capped", [candidate(1, 0, [], 7.0)])
    with open(capped / "config.toml", "a") as config:
        config.write("[caps]\npatience = 2\nprices = {}\n")
    with open(capped / "events.jsonl", "a") as log:
        log.write(json.dumps({"type": "stop", "cap": "patience", "used": 2, "limit": 2}) + "\n")
    for p in capped.iterdir():
        os.utime(p, (old, old))
    run = reader.HeuristicRun(capped, stale_after=600)
    assert run.state == "capped: patience" and run.row()["caps"]["patience"] == 2 and "prices" not in run.row()["caps"]


def test_a_runs_writer_lock_tells_running_from_stopped_at_once(tmp_path):
    """A run held by its writer (a real process holding it as `coevolve run` does) is running, its page naming
    the holder; once that process is SIGKILLed it is stopped at once, however recently it wrote and however
    large --stale-after. A lock file with no holder's record (a file system without flock: its writer went
    unguarded) tells nothing, so --stale-after decides, as for a run written before the lock."""
    live = make_run(tmp_path / "runs" / "live", [candidate(1, 0, [], 7.0)])
    holder = start_holder("run", live)
    try:
        with client(tmp_path / "runs", stale_after=86400) as http:
            page = http.get("/api/run/live").json()
            row = http.get("/api/runs").json()["runs"][0]
    finally:
        stop(holder)  # SIGKILL
    assert page["state"] == row["state"] == "running"
    with client(tmp_path / "runs", stale_after=86400) as http:
        killed = http.get("/api/run/live").json()
        killed_row = http.get("/api/runs").json()["runs"][0]
    assert killed["state"] == killed_row["state"] == "stopped"
    holding = rf"pid {holder.pid} on {re.escape(socket.gethostname())}, {SINCE}"
    assert re.fullmatch(holding, page["writer"]) and page["writer"] == row["writer"]
    assert killed["writer"] is killed_row["writer"] is None
    # no flock where it was written: hold_directory made the file, found no flock and recorded nothing
    unguarded = make_run(tmp_path / "unguarded", [candidate(1, 0, [], 7.0)])
    (unguarded / ".writer.lock").touch()
    assert reader.HeuristicRun(unguarded, stale_after=600).state == "running"  # written just now
    old = time.time() - 3600
    for p in unguarded.iterdir():
        os.utime(p, (old, old))
    assert reader.HeuristicRun(unguarded, stale_after=600).state == "stopped"


def test_a_comparisons_writer_lock_tells_running_from_stopped(tmp_path):
    """A comparison held by `coevolve compare` (a real process holding it as it does) is running, naming the
    holder, on the runs list and its page; once that process is killed it is stopped; one without a lock
    file (written before it) stays partial: nothing tells whether it goes on."""
    root = tmp_path / "cmp"
    root.mkdir()
    (root / "table.csv").write_text("kind,task,method\nmethod,tsp_construct,eoh\n")
    (root / "runs.csv").write_text("task,method,budget,seed,state,dir\n"
                                   "tsp_construct,eoh,10,0,finished,runs/tsp_construct/eoh-b10-s0\n"
                                   "tsp_construct,eoh,10,1,partial,runs/tsp_construct/eoh-b10-s1\n")
    entry = reader.Entry("cmp", "comparison", root, "cmp")
    assert reader.summarise(entry, 600.0)["state"] == "partial"
    holder = start_holder("compare", root)
    try:
        row = reader.summarise(entry, 600.0)
        data = reader.comparison(root, reader.Registry.open([root]))
    finally:
        stop(holder)
    assert row["state"] == "running" and data["state"] == "running"
    assert re.fullmatch(rf"pid {holder.pid} on \S+, {SINCE}", row["writer"]) and data["writer"] == row["writer"]
    row = reader.summarise(entry, 600.0)
    assert (row["state"], row["writer"]) == ("stopped", None)


def test_a_folder_of_runs_is_searched_and_followed(tmp_path):
    make_run(tmp_path / "runs" / "a", [candidate(1, 0, [], 7.0)])
    registry = reader.Registry.open([tmp_path / "runs"])
    assert sorted(registry.entries) == ["a"]
    make_run(tmp_path / "runs" / "task" / "b", [candidate(1, 0, [], 7.0)])  # started later
    registry.scan()
    assert sorted(registry.entries) == ["a", "task~b"]


def test_an_id_is_the_runs_path_and_an_unknown_one_is_a_404_that_says_why(tmp_path):
    """Ids come from the directory's path under the folder served, not from the order runs were found: a
    run that appears earlier in the listing (found first after a restart) takes no other run's id, and an
    id no directory has (a name with the old discovery-order suffix) is a 404 saying why, not another run."""
    runs = tmp_path / "runs"
    zeta = make_run(runs / "zeta" / "eoh-b12-s0", [candidate(1, 0, [], 7.0)])
    with client(runs) as http:
        before = {r["label"]: r["id"] for r in http.get("/api/runs").json()["runs"]}
    alpha = make_run(runs / "alpha" / "eoh-b12-s0", [candidate(1, 0, [], 5.0)])  # listed before zeta
    odd = make_run(runs / "my run #1", [candidate(1, 0, [], 6.0)])
    with client(runs) as http:  # a restart: alpha is found first
        after = {r["label"]: r["id"] for r in http.get("/api/runs").json()["runs"]}
        opened = http.get(f"/api/run/{after[str(zeta)]}").json()
        odd_page = http.get(f"/api/run/{after[str(odd)]}")
        stale = [http.get(f"/api/run/{ident}") for ident in ("eoh-b12-s0", "eoh-b12-s0-2")]
        wrong_kind = http.get(f"/api/compare/{after[str(zeta)]}")
    assert before == {str(zeta): "zeta~eoh-b12-s0"}
    assert after[str(zeta)] == "zeta~eoh-b12-s0" and after[str(alpha)] == "alpha~eoh-b12-s0"
    assert opened["label"] == str(zeta) and opened["best"] == 7.0
    # URL-safe: other characters replaced, and a digest of the path keeps the id its own
    assert re.fullmatch(r"my-run--1-[0-9a-f]{8}", after[str(odd)]) and odd_page.json()["best"] == 6.0
    for answer, ident in zip(stale, ("eoh-b12-s0", "eoh-b12-s0-2")):
        assert answer.status_code == 404
        assert answer.json()["error"].startswith(f"not found: no run or comparison here has the id '{ident}': an "
                                                 "id is the directory's path under the folder served")
    assert wrong_kind.status_code == 404
    assert wrong_kind.json()["error"] == "not found: 'zeta~eoh-b12-s0' is a heuristic run, not a comparison"


def test_directories_served_together_are_told_apart_by_their_names(tmp_path):
    """Two folders given that hold the same task/run: each id starts with its folder's name, with the
    folders above it where the names alone are the same; a run given itself is its name."""
    first, second = (make_run(tmp_path / side / "runs" / "tsp" / "eoh-b12-s0", [candidate(1, 0, [], 7.0)])
                     for side in ("a", "b"))
    single = make_run(tmp_path / "c" / "one", [candidate(1, 0, [], 7.0)])
    registry = reader.Registry.open([tmp_path / "a" / "runs", tmp_path / "b" / "runs", single])
    assert {e.path: e.id for e in registry.entries.values()} == {
        first: "a~runs~tsp~eoh-b12-s0", second: "b~runs~tsp~eoh-b12-s0", single: "one"}


def test_ten_thousand_candidates_stay_responsive(tmp_path, monkeypatch):
    records = [candidate(1, 0, [], 10.0)]
    for cid in range(2, 10_001):
        ok = cid % 5 == 0
        records.append(candidate(cid, cid // 20, [max(1, cid - 20)], 10.0 - cid / 1e4 if ok else None,
                                 None if ok else "exception"))
    run = make_run(tmp_path / "big", records)
    parsed: list[str] = []
    parse = reader.read_jsonl
    monkeypatch.setattr(reader, "read_jsonl", lambda path: parsed.append(Path(path).name) or parse(path))
    with client(run) as http:
        http.get("/api/run/big")  # the first look parses the files
        assert "candidates.jsonl" in parsed
        parsed.clear()
        summary = http.get("/api/run/big").json()
        page = http.get("/api/run/big/candidates?offset=9950&limit=50&order=rank").json()
        tree = http.get("/api/run/big/tree").json()
        detail = http.get("/api/run/big/candidate/10000").json()
    assert parsed == []  # later looks answer from the parsed files (timings: benchmarks/dashboard_scale.py)
    assert summary["used"] == 10_000 and summary["best_id"] == 10_000
    assert len(page["rows"]) == 50 and page["total"] == 10_000
    assert tree["collapsed"] and len(tree["nodes"]) <= 1000 and tree["total"] == 10_000
    assert detail["diffs"][0]["parent"] == 9980
    # what the page holds stays small: a page of rows, no code
    assert len(json.dumps(page)) < 50_000


def test_a_comparison_shows_the_report_verdicts(tmp_path):
    from coevolve.report import _table_rows_csv, _write_csv, verdict

    def arm(method: str, mean: float, std: float) -> dict:
        return {"kind": "method", "task": "tsp_construct", "budget": 36, "split": "test", "size": 50,
                "method": method, "objective": {"mean": mean, "std": std, "n": 3}}

    base, variant = arm("eoh", 6.95, 0.1), arm("eoh+esopt", 6.90, 0.2)
    delta = {"kind": "delta", "task": "tsp_construct", "budget": 36, "split": "test", "size": 50,
             "method": "eoh -> eoh+esopt", "base": "eoh", "variant": "eoh+esopt", "delta": 0.01,
             **verdict(base, variant)}
    root = tmp_path / "cmp"
    root.mkdir()
    _write_csv(root / "table.csv", _table_rows_csv([base, variant, delta]))
    (root / "runs.csv").write_text("task,method,budget,seed,state,dir\n")
    data = reader.comparison(root, reader.Registry.open([root]))
    assert "verdict" in data["columns"]
    assert data["rows"][2]["verdict"] == "cannot be told apart"
    committed = reader.comparison(COMPARISON, reader.Registry.open([COMPARISON]))
    assert len(committed["rows"]) == 3 and len(committed["plots"]) == 2 and len(committed["runs"]) == 6
    assert committed["arms"] == []  # a report from before named arms
    # named arms: what each sets, from results.json
    (root / "results.json").write_text(json.dumps({"rows": [delta], "named_arms": ["eoh-cold: EoH with sampling.temperature = 0.2"]}))
    assert reader.comparison(root, reader.Registry.open([root]))["arms"] == ["eoh-cold: EoH with sampling.temperature = 0.2"]
    assert committed["failures"] == []  # a report from before it said why candidates failed
    # why candidates failed, per arm, from results.json; an arm with none is left out
    failures = [{"task": "tsp_construct", "method": "eoh", "budget": 36, "candidates": 108, "failed": 70,
                 "causes": [["NameError: name 'd' is not defined", 40], ["<b>x</b>", 3]]},
                {"task": "tsp_construct", "method": "eoh+esopt", "budget": 36, "candidates": 108, "failed": 0,
                 "causes": []}]
    (root / "results.json").write_text(json.dumps({"rows": [delta], "failures": failures}))
    assert reader.comparison(root, reader.Registry.open([root]))["failures"] == [
        {"task": "tsp_construct", "method": "eoh", "budget": 36, "failed": "70 of 108",
         "causes": [{"cause": "NameError: name 'd' is not defined", "count": 40}, {"cause": "<b>x</b>", "count": 3}]}]


def test_a_comparisons_numbers_are_numbers_and_missing_ones_null(tmp_path):
    """The compare JSON gives table.csv's and runs.csv's numbers as numbers (an API client sorts and plots
    them), an empty cell as null, and text as text."""
    import csv

    with client(COMPARISON) as http:
        data = http.get("/api/compare/pipeline_check_eoh_esopt_tsp").json()
    with open(COMPARISON / "table.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    method, delta = data["rows"][0], data["rows"][-1]
    assert (method["budget"], method["size"], method["runs"], method["instances"]) == (36, 50, 3, 200)
    assert method["objective_mean"] == float(table[0]["objective_mean"]) and method["objective_std"] == 0.0
    assert method["gap_std"] == float(table[0]["gap_std"])  # 3.39...e-17: an exponent too
    assert (method["kind"], method["method"], method["base"]) == ("method", "eoh", None)
    assert isinstance(delta["delta"], float) and delta["variant"] == "eoh+esopt"
    run = data["runs"][0]
    assert (run["budget"], run["seed"], run["state"]) == (36, 0, "finished")
    assert isinstance(run["objective"], float) and isinstance(run["gap"], float)
    # cell by cell, a number where the CSV wrote one and text where it did not
    for row, raw in zip(data["rows"], table):
        for key, value in raw.items():
            assert row[key] == (None if value == "" else float(value) if reader.NUMBER.fullmatch(value) else value)
    assert reader.csv_value("1e999") is None and reader.csv_value("inf") == "inf"  # JSON holds no inf


def test_plots_are_served_only_from_the_plots_folder(tmp_path):
    with client(COMPARISON) as http:
        ident = "pipeline_check_eoh_esopt_tsp"
        ok = http.get(f"/api/compare/{ident}/plot/progress-tsp_construct-b36.png")
        assert ok.status_code == 200 and ok.content[:4] == b"\x89PNG"
        assert http.get(f"/api/compare/{ident}/plot/..%2Freport.md").status_code == 404
        assert http.get(f"/api/compare/{ident}/plot/report.md").status_code == 404
        js = http.get("/vendor/plotly.min.js")
        assert js.status_code == 200 and len(js.content) > 1_000_000  # served from the plotly package
        assert "script-src 'self'" in http.get("/").headers["content-security-policy"]


def make_agent_run(path: Path) -> Path:
    """An agent run directory in the layout es_agent writes, with the run's own writers."""
    from coevolve.agents.rollout import Trajectory, save_trajectories
    from coevolve.base.durable import append_jsonl, atomic_write_jsonl

    path.mkdir(parents=True)
    (path / "config.toml").write_text('[run]\nmethod = "esopt+trace2skill"\ntask = "sudoku"\nbudget = 16\nseed = 0\n'
                                      '[agent]\npopulation = 2\nbatch = 2\n')
    episodes = [Trajectory("sudoku", f"case-{i}", [{"role": "system", "content": "rules"},
                                                   {"role": "assistant", "content": f"<b>move {i}</b>"}],
                           [f"move {i}"], ["board"], reward=float(i % 2), turns=1, label=f"round 0 member {i % 2}")
                for i in range(4)]
    save_trajectories(episodes, path / "trajectories" / "round_000", "Round 0")
    events = path / "events.jsonl"
    append_jsonl(events, {"type": "start", "kind": "agent", "version": 1})
    append_jsonl(events, {"type": "round", "round": 0, "episodes_used": 4, "fitness": [0.5, 0.5],
                          "mean_reward": 0.5, "solved_rate": 0.5})
    append_jsonl(events, {"type": "skill", "round": 0, "name": "sudoku-moves", "text": "---\nname: sudoku-moves\n---\nv1"})
    append_jsonl(events, {"type": "skill", "round": 1, "name": "sudoku-moves", "text": "---\nname: sudoku-moves\n---\nv2"})
    record = {"round": 0, "episodes_used": 4, "mean_reward": 0.25, "solved": 0.25,
              "mean@4": {"mean": 0.3, "low": 0.1, "high": 0.5}}
    append_jsonl(events, {"type": "eval", **record})
    atomic_write_jsonl(path / "eval.jsonl", [record])
    return path


def test_an_agent_run_shows_rounds_skills_and_episodes(tmp_path):
    run = make_agent_run(tmp_path / "agent")
    assert reader.kind_of(run) == "agent"
    with client(run) as http:
        row = http.get("/api/runs").json()["runs"][0]
        assert (row["kind"], row["used"], row["budget"], row["best"]) == ("agent", 4, 16, 0.25)
        detail = http.get("/api/agent/agent").json()
        assert [s["text"][-2:] for s in detail["skills"]] == ["v1", "v2"]
        assert detail["evals"][0]["metrics"]["mean@4"] == {"mean": 0.3, "low": 0.1, "high": 0.5}
        assert detail["episode_files"] == ["round_000"]
        page = http.get("/api/agent/agent/episodes/round_000?limit=3").json()
        assert page["total"] == 4 and len(page["episodes"]) == 3
        assert page["episodes"][0]["messages"][1]["content"] == "<b>move 0</b>"  # text; the page never parses it
        assert http.get("/api/agent/agent/episodes/..%2Fevents").status_code == 404


def test_an_agent_evaluation_shows_mean_and_pass_at_k_from_its_trajectories(tmp_path):
    from coevolve.agents.rollout import Trajectory, save_trajectories

    run = make_agent_run(tmp_path / "agent")
    # the held-out evaluation of round 0: 3 cases, 2 attempts each (rewards 1/0, 0/0, 1/1)
    rewards = {"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [1.0, 1.0]}
    save_trajectories([Trajectory("sudoku", case, [{"role": "system", "content": "rules"}], [], ["board"], reward=r, turns=1,
                                  label="eval")
                       for case, rs in rewards.items() for r in rs], run / "trajectories" / "eval_000", "Eval 0")
    metrics = reader.AgentRun(run).detail()["evals"][0]["metrics"]
    assert metrics["Mean@2"]["mean"] == pytest.approx(0.5) and metrics["Pass@2"]["mean"] == pytest.approx(2 / 3)
    # a 95% Student-t interval over the 3 cases (t = 4.303 for 2 degrees of freedom), clipped to [0, 1]
    half = 4.303 * 0.5 / 3 ** 0.5
    assert metrics["Mean@2"]["low"] == pytest.approx(max(0.0, 0.5 - half), abs=1e-3)
    assert metrics["mean@4"] == {"mean": 0.3, "low": 0.1, "high": 0.5}  # what the record held stays


def test_an_agent_runs_held_out_change_is_paired_per_problem(tmp_path, monkeypatch):
    from coevolve.agents.rollout import Trajectory, save_trajectories
    from coevolve.base.durable import append_jsonl
    from coevolve.report import collecting

    run = make_agent_run(tmp_path / "agent")
    with client(run) as http:
        assert http.get("/api/agent/agent").json()["change"] is None  # one evaluation: nothing to pair
    for index, rewards in ((0, {"a": 0.0, "b": 1.0, "c": 0.0}), (2, {"a": 1.0, "b": 0.0, "c": 1.0})):
        save_trajectories([Trajectory("sudoku", case, [{"role": "system", "content": "rules"}], [], [""], reward=r,
                                      label="eval") for case, r in rewards.items()],
                          run / "trajectories" / f"eval_{index:03d}", "Eval")
    later = {"round": 2, "episodes_used": 8, "mean_reward": 2 / 3}
    append_jsonl(run / "events.jsonl", {"type": "eval", **later})  # the run logs each evaluation as it goes
    parsed: list[str] = []
    for module in (reader, collecting):  # every parse of a JSON-lines file, the dashboard's cached ones and others
        monkeypatch.setattr(module, "read_jsonl", lambda path, parse=module.read_jsonl: parsed.append(Path(path).name)
                            or parse(path))
    with client(run) as http:
        assert http.get("/api/agent/agent").json()["change"] == (
            "+0.333: 2 of 3 problems better, 1 worse; cannot be told apart (sign test p = 1)")
        assert {"eval_000.jsonl", "eval_002.jsonl"} <= set(parsed)
        parsed.clear()
        assert http.get("/api/agent/agent").json()["change"].startswith("+0.333: 2 of 3")
    assert parsed == []  # a later look (the page polls) parses no episode file again


def test_run_files_are_read_as_their_records(tmp_path):
    """Agent runs written before configs dumped every section are told by their
    summary; a candidate line of the wrong shape names its file, line and field."""
    import shutil

    for name in ("agent_before_events", "agent_esopt"):
        shutil.copytree(ROOT / "tests" / "data" / "old_runs" / name, tmp_path / name)
        assert reader.kind_of(tmp_path / name) == "agent"
    detail = reader.AgentRun(tmp_path / "agent_esopt").detail()
    assert [e["metrics"]["solved_rate"]["mean"] for e in detail["evals"]] == [0.0, 0.0]
    assert detail["row"]["used"] == 4 and detail["row"]["best"] == 0.25  # from the typed summary: no round events
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0), {**candidate(2, 1, [1], 6.0), "parents": "one"}])
    with client(run) as http:
        answer = http.get("/api/run/run")
        error = answer.json()["error"]
        assert answer.status_code == 422 and "unexpected file content" in error
        assert "candidates.jsonl line 2: not a valid Candidate: parents" in error


def test_a_run_says_whether_its_method_moves_weights(tmp_path):
    """The ES panel of a method without ES says so instead of waiting for generations that never come."""
    eoh = make_run(tmp_path / "eoh", [candidate(1, 0, [], 7.0)])
    es = make_run(tmp_path / "es", [candidate(1, 0, [], 7.0)])
    (es / "config.toml").write_text((es / "config.toml").read_text().replace('"eoh"', '"eoh+esopt+trace2skill"'))
    agent = make_agent_run(tmp_path / "agent")
    skill_only = make_agent_run(tmp_path / "skill_only")
    (skill_only / "config.toml").write_text((skill_only / "config.toml").read_text().replace("esopt+", ""))
    with client(eoh, es, agent, skill_only) as http:
        rows = {r["name"]: r for r in http.get("/api/runs").json()["runs"]}
        assert {n: (r["method"], r["uses_es"]) for n, r in rows.items()} == {
            "eoh": ("eoh", False), "es": ("eoh+esopt+trace2skill", True),
            "agent": ("esopt+trace2skill", True), "skill_only": ("trace2skill", False)}
        assert http.get("/api/run/eoh").json()["uses_es"] is False


def test_a_run_page_names_its_commonest_failures(tmp_path):
    run = make_run(tmp_path / "run", [candidate(1, 0, [], None, "exception"), candidate(2, 0, [], 7.0),
                                      candidate(3, 0, [], None, "exception"),
                                      {**candidate(4, 0, [], None, "invalid"), "message": "the tour repeats a city"}])
    with client(run) as http:
        causes = http.get("/api/run/run").json()["failure_causes"]
    # "boom 1" and "boom 3" differ only in a number: one cause, shown as the first
    assert causes == [{"cause": "boom 1", "count": 2}, {"cause": "the tour repeats a city", "count": 1}]


def finish(run: Path, **context: object) -> dict:
    """summary.json as a finished run writes it (the template as its best.py, so its best is the starting
    point), with every row of the run table that only the summary holds; `context` overrides its keys."""
    from tasks.registry import get_task

    summary = {
        "kind": "search", "method": "eoh+esopt", "task": "tsp_construct", "seed": 3, "budget": 20, "evaluations": 3,
        "ledger": {"budget": 20, "used": 3, "outcomes": {"evaluated": 3}, "llm_requests": 3, "prompt_tokens": 90,
                   "completion_tokens": 60, "parse_retries": 2, "clone_retries": 1},
        "valid": 2, "valid_rate": 2 / 3, "failures": {"exception": 1},
        "train": {"split": "train", "size": 50, "direction": "min", "reference": 5.7},
        "best": {"id": 1, "objective": 7.0, "gap": 0.23, "operator": "i1", "step": 0},
        "es": {"updates": 2, "flat": 1},
        "context": {"phases": {"initial": {"candidates": 3, "valid": 2}}, "constrain": "on", "fingerprint": False,
                    "rejected": 0, "rejected_template": 0, "parser_repairs": {}, "repair_requests": 2,
                    "repaired_valid": 1, "leaned": {"requests": 1, "max_len": 2048, "refused": 0},
                    "scoring_seeds": 3, "cut_off": {"replies": 1, "valid": 0, "max_tokens": 512},
                    "skill_versions": [{"version": 1, "path": "skills/\x1b[2Jv001/SKILL.md", "rules": 4}],
                    "template_objective": 7.0, "beat_template": False, "seed": True, **context}}
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "best.py").write_text(get_task("tsp_construct").template)
    return summary


def test_a_finished_runs_page_has_the_run_table_coevolve_run_printed(tmp_path):
    from coevolve.base.records import read_summary
    from coevolve.report.rendering import run_table_rows

    records = [candidate(1, 0, [], 7.0), candidate(2, 0, [], None, "exception"), candidate(3, 1, [1], 7.5)]
    done, running = make_run(tmp_path / "done", records, end=True), make_run(tmp_path / "running", records)
    finish(done)
    with client(done, running) as http:
        table = http.get("/api/run/done").json()["table"]
        assert http.get("/api/run/running").json()["table"] is None  # no summary yet: no table
    printed = run_table_rows(read_summary(done / "summary.json"), done.resolve())
    assert any("\x1b" in value for _, value in printed)  # a path the run wrote: the page gets it cleaned
    assert table == [[name, value.replace("\x1b[2J", "")] for name, value in printed]
    rows = dict(table)
    assert rows["best is"] == "the task template itself: nothing better than the starting point was found"
    assert rows["beat the template"] == "no (template 7, seeded into the archive, not charged)"
    assert rows["ES updates"] == "2 (1 with every member's reward equal: no weight moved)"
    assert rows["free re-asks"].startswith("2 of unparseable replies, 1 of clones")
    assert rows["skill versions"] == "1, latest skills/v001/SKILL.md (4 rules)"
    assert {"prompts shortened", "scoring", "cut off", "repair operator", "commonest failures"} <= set(rows)


def test_a_run_table_that_cannot_be_made_leaves_the_page_without_it(tmp_path):
    """A summary of an older layout still makes its table (the rendering copes with the keys it lacks); one
    whose context another writer shaped otherwise leaves it out, and the page serves on."""
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0)], end=True)
    summary = finish(run)
    del summary["context"]["leaned"], summary["context"]["cut_off"], summary["context"]["scoring_seeds"]
    (run / "summary.json").write_text(json.dumps(summary))
    with client(run) as http:
        rows = dict(http.get("/api/run/run").json()["table"])
        assert "beat the template" in rows and "cut off" not in rows
    (run / "summary.json").write_text(json.dumps({**summary, "context": {**summary["context"], "phases": 3}}))
    with client(run) as http:
        answer = http.get("/api/run/run")
        assert answer.status_code == 200 and answer.json()["table"] is None


def test_the_run_table_compares_the_best_with_the_dashboards_one_build_of_the_task(tmp_path, monkeypatch):
    """The run table's "best is" row needs the task's template: it comes from the task the runs list, the
    run page and the seeded template share (one build per name for the whole dashboard), never from a
    build of the report's own; a task that cannot be built leaves the table out and is not built again."""
    from coevolve.report import collecting

    built: list[str] = []
    again: list[str] = []  # builds of the report's own
    build = reader.heuristic_task
    monkeypatch.setattr(reader, "heuristic_task", lambda name: built.append(name) or build(name))
    monkeypatch.setattr(collecting, "heuristic_task", lambda name: again.append(name) or build(name))
    monkeypatch.setattr(reader, "_REFERENCES", {})
    forget_built_tasks()
    records = [candidate(1, 0, [0], 7.0), candidate(2, 0, [], None, "exception")]
    done, other, gone = (make_run(tmp_path / name, records, end=True) for name in ("done", "other", "gone"))
    for run in (done, other, gone):
        seed_events(run)
        finish(run)
    missing = str(tmp_path / "gone.py")
    (gone / "config.toml").write_text((gone / "config.toml").read_text().replace('"tsp_construct"', repr(missing)))
    try:
        with client(done, other, gone) as http:
            for _ in range(2):  # the page polls
                http.get("/api/runs")
                pages = {name: http.get(f"/api/run/{name}").json() for name in ("done", "other", "gone")}
                http.get("/api/run/done/candidate/0")
        assert sorted(built) == sorted(["tsp_construct", missing]) and again == []
        for name in ("done", "other"):
            assert dict(pages[name]["table"])["best is"].startswith("the task template itself")
        assert pages["gone"]["table"] is None
    finally:
        forget_built_tasks()  # the next test builds with the real registry


def test_the_run_table_is_made_once_per_change_of_the_summary(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0), candidate(2, 0, [], None, "exception")], end=True)
    summary = finish(run)
    made: list[int] = []
    make = reader.run_table_rows
    monkeypatch.setattr(reader, "run_table_rows", lambda s, d, b: made.append(s.evaluations) or make(s, d, b))
    with client(run) as http:
        for _ in range(3):  # the page polls
            assert dict(http.get("/api/run/run").json()["table"])["evaluations"] == "3 / 20"
        assert made == [3]
        fresh = run / "summary.new"  # replaced whole, as the run replaces it (--resume --budget, then its end)
        fresh.write_text(json.dumps({**summary, "evaluations": 4, "budget": 30}))
        os.replace(fresh, run / "summary.json")
        assert dict(http.get("/api/run/run").json()["table"])["evaluations"] == "4 / 30"
        http.get("/api/run/run")
    assert made == [3, 4]


def test_the_best_of_equal_objectives_is_the_runs_tie_break_winner(tmp_path):
    """[eoh] tie_break ranks equal objectives on the page as the run ranked them (the summary's best):
    under "min lines" the shorter program; without, the earlier one; a repeat (score reused in no time)
    never outranks its original, even under "min seconds"; one of a seeded program stands for it."""
    longer = {**candidate(2, 0, [], 7.0), "code": candidate(2, 0, [], 7.0)["code"] + "    # more\n    pass\n"}
    records = [longer, candidate(3, 0, [], 7.0), {**candidate(4, 1, [2], 7.0), "duplicate_of": 2, "seconds": 0.0}]
    plain = make_run(tmp_path / "plain", records)
    tied = make_run(tmp_path / "tied", records)
    with open(tied / "config.toml", "a") as handle:
        handle.write('[eoh]\ntie_break = ["min seconds", "min lines"]\n')
    template_repeat = make_run(tmp_path / "again", [{**candidate(5, 0, [], 7.0), "duplicate_of": 0}])
    with client(plain, tied, template_repeat) as http:
        best = {name: http.get(f"/api/run/{name}").json()["best_id"] for name in ("plain", "tied", "again")}
    assert best == {"plain": 2, "tied": 3, "again": 5}
    assert reader.HeuristicRun(tied).ranks() == {3: 1, 2: 2, 4: 3}  # the repeat right after its original


def test_a_trace2skill_runs_counts_are_the_run_tables_while_it_runs_and_once_it_ended(tmp_path):
    """The skill analysts' requests are charged evaluations that make no candidate: the runs list and the
    run page count them, as the run table does (48 / 48 and valid 25.0%, not 44/48 and 27.3%)."""
    from test_search_loop import make_config, run as search_run

    summary, _, _ = search_run(tmp_path / "run", make_config("eoh+esopt+trace2skill", 31, seed=3))
    directory = tmp_path / "run"
    assert len((directory / "candidates.jsonl").read_text().splitlines()) < summary.evaluations == 31
    ended = reader.HeuristicRun(directory).row()
    assert (ended["used"], ended["valid"], ended["valid_rate"]) == (31, summary.valid, summary.valid_rate)
    # the same run before its end: no summary, no end event; its log and candidates count the same
    (directory / "summary.json").unlink()
    events = (directory / "events.jsonl").read_text().splitlines()
    (directory / "events.jsonl").write_text("\n".join(e for e in events if '"type": "end"' not in e) + "\n")
    holder = start_holder("run", directory)  # its writer, as `coevolve run` holds it
    try:
        running = reader.HeuristicRun(directory).row()
    finally:
        stop(holder)
    assert running["state"] == "running"
    assert (running["used"], running["valid_rate"]) == (31, summary.valid_rate)


def test_a_trace2skill_runs_curves_are_against_the_evaluations_charged(tmp_path):
    """The curves' x is the budget axis: a refresh's analysts are charged between candidates (ids 15-17) and
    after the last one (32-34), so the valid rate at a candidate is the valid ones over its evaluation number,
    and the curves end at the 34 evaluations spent with the run table's valid rate, not at candidate 31."""
    from test_search_loop import make_config, run as search_run

    summary, _, _ = search_run(tmp_path / "run", make_config("eoh+esopt+trace2skill", 34, seed=3))
    records = [json.loads(line) for line in (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()]
    ids = [c["id"] for c in records]
    assert 15 not in ids and ids[-1] == 31 < summary.evaluations == 34
    curves = reader.HeuristicRun(tmp_path / "run").curves()
    valid_so_far = [sum(c["objective"] is not None for c in records[:n]) for n in range(1, len(records) + 1)]
    assert curves["x"] == [*ids, 34]
    assert curves["valid_rate"] == [*(v / i for v, i in zip(valid_so_far, ids)), summary.valid_rate]
    assert curves["best"][-1] == curves["best"][-2]  # no candidate at 34: the best so far stays


def test_a_comparisons_row_counts_runs_not_runs_csv_rows(tmp_path):
    """runs.csv has a row per run and test set: 2 runs scored on 2 sets are 2 runs, 1 of them finished."""
    root = tmp_path / "cmp"
    root.mkdir()
    (root / "table.csv").write_text("kind,task,method\nmethod,tsp_construct,eoh\n")
    (root / "runs.csv").write_text(
        "task,method,budget,seed,state,dir,split,size\n"
        + "".join(f"tsp_construct,eoh,10,{seed},{state},runs/tsp_construct/eoh-b10-s{seed},test,{size}\n"
                  for seed, state in ((0, "finished"), (1, "running")) for size in (20, 50)))
    row = reader.summarise(reader.Entry("cmp", "comparison", root, "cmp"), 600.0)
    assert (row["used"], row["budget"], row["state"]) == (1, 2, "partial")


def interrupted_comparison(root: Path) -> None:
    """A real comparison (fake engine, real sandbox) of 4 planned runs interrupted as its second run
    started: run 1 finished, run 2's folder made, runs 3 and 4 not begun, no report written."""
    from coevolve.base.config import build_config
    from coevolve.compare import CompareConfig, run_comparison
    from search_fakes import FakeEngine

    config = build_config(CompareConfig, {"compare": {"methods": ["sample", "eoh"], "budgets": [3], "seeds": [0, 1]},
                                          "test": {"sizes": [20], "limit": 5}})

    def log(line: str) -> None:
        if line.startswith("[2/4]"):  # Ctrl-C as the second run starts
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_comparison(config, root, engine=FakeEngine(), log=log, progress=False)


def test_a_running_or_interrupted_comparison_counts_its_finished_runs_of_its_planned_runs(tmp_path):
    """While a comparison runs, and after it was interrupted, it has no report (runs.csv, table.csv):
    its progress is its runs finished (plan.run_state, as the comparison tells them) of its planned runs
    (compare.toml's plan), its arm runs are listed from their folders, and the page says when its table
    and plots come and how to render them (walkthrough s52, finding 3)."""
    root = tmp_path / "cmp"
    interrupted_comparison(root)
    assert not (root / "runs.csv").exists() and not (root / "table.csv").exists()
    with client(root) as http:
        row = next(r for r in http.get("/api/runs").json()["runs"] if r["kind"] == "comparison")
        data = http.get("/api/compare/cmp").json()
    # interrupted: its lock is no other process's (this one's run_comparison held it), so stopped at once, as
    # the run it interrupted, however recently written (no --stale-after wait)
    assert [(r["method"], r["seed"], r["state"]) for r in data["runs"]] == [
        ("sample", 0, "finished"), ("eoh", 0, "stopped"), ("sample", 1, "new"), ("eoh", 1, "new")]
    assert (row["used"], row["budget"], row["state"]) == (1, 4, "stopped")
    assert (row["writer"], data["state"], data["writer"]) == (None, "stopped", None)
    assert (row["task"], row["method"]) == ("tsp_construct", "eoh, sample")
    assert data["runs"][0]["id"] == "cmp~runs~tsp_construct~sample-b3-s0" and data["runs"][2]["id"] is None
    assert data["runs"][1]["dir"] == "runs/tsp_construct/eoh-b3-s0"
    assert (data["columns"], data["rows"], data["plots"]) == ([], [], [])
    assert data["note"] == (f"1 of 4 runs finished. The table, verdicts and plots come when the report is rendered: "
                            f"`coevolve compare` renders it once every run has finished; `coevolve report {root}` "
                            "renders it now from the runs finished.")
    # rendered now, as the note says: the report's runs are the plan's, and the note is gone
    from coevolve.report import render
    render(root)
    with client(root) as http:
        row = next(r for r in http.get("/api/runs").json()["runs"] if r["kind"] == "comparison")
        data = http.get("/api/compare/cmp").json()
    assert (row["used"], row["budget"], row["state"]) == (1, 4, "stopped")
    assert [(r["method"], r["seed"], r["state"]) for r in data["runs"]] == [
        ("sample", 0, "finished"), ("eoh", 0, "stopped"), ("sample", 1, "new"), ("eoh", 1, "new")]
    assert data["rows"] and data["note"] is None


def test_a_report_rendered_before_more_runs_finished_says_so(tmp_path):
    """runs.csv is the report's: a run finished since then counts now, and the page says to render again."""
    root = tmp_path / "cmp"
    interrupted_comparison(root)
    from coevolve.report import render
    render(root)
    done = root / "runs" / "tsp_construct" / "sample-b3-s0"
    later = root / "runs" / "tsp_construct" / "sample-b3-s1"  # as if the rerun had finished it since
    later.mkdir()
    for name in ("config.toml", "events.jsonl", "summary.json"):
        (later / name).write_bytes((done / name).read_bytes())
    with client(root) as http:
        row = next(r for r in http.get("/api/runs").json()["runs"] if r["kind"] == "comparison")
        data = http.get("/api/compare/cmp").json()
    assert (row["used"], row["budget"]) == (2, 4)
    assert data["note"] == (f"2 of 4 runs finished. The report was rendered when 1 had finished: "
                            f"`coevolve report {root}` renders it again.")


def test_a_comparisons_table_lists_each_column_once_and_fractions_as_the_report_shows_them(tmp_path):
    """table.csv has a `why` and no `verdict`: the verdict is added once, `why` kept once; the gap, the
    valid rate and Δ are shown as report.md shows them (23.33%, +1.0%), and stay numbers in `rows`
    (walkthrough s52, finding 10)."""
    from coevolve.report import _table_rows_csv, _write_csv, verdict

    def arm(method: str, mean: float, gap: float) -> dict:
        return {"kind": "method", "task": "tsp_construct", "budget": 36, "split": "test", "size": 50,
                "method": method, "objective": {"mean": mean, "std": 0.1, "n": 3},
                "gap": {"mean": gap, "std": 0.01, "n": 3}, "train_valid_rate": {"mean": 0.5, "std": None, "n": 3}}

    base, variant = arm("eoh", 6.95, 0.23333), arm("eoh+esopt", 6.90, 0.231)
    delta = {"kind": "delta", "task": "tsp_construct", "budget": 36, "split": "test", "size": 50,
             "method": "eoh -> eoh+esopt", "base": "eoh", "variant": "eoh+esopt", "delta": 0.01,
             **verdict(base, variant)}
    root = tmp_path / "cmp"
    root.mkdir()
    _write_csv(root / "table.csv", _table_rows_csv([base, variant, delta]))
    (root / "results.json").write_text(json.dumps({"rows": [delta]}))
    data = reader.comparison(root, reader.Registry.open([root]))
    assert data["columns"].count("why") == 1 and data["columns"].count("verdict") == 1
    first, last = data["rows"][0], data["rows"][2]
    assert first["gap_mean"] == 0.23333 and first["shown"]["gap_mean"] == "23.33%"
    assert first["shown"]["gap_std"] == "1.00%" and first["shown"]["train_valid_rate_mean"] == "50.00%"
    assert last["delta"] == 0.01 and last["shown"]["delta"] == "+1.0%"
    assert "objective_mean" not in first["shown"]  # not a fraction: a number as it is


def test_a_valid_repeat_is_a_valid_outcome_as_the_run_table_counts_it(tmp_path):
    """A repeat of a valid program scores valid (the run table's valid counts it, `N repeats`): its outcome
    is `valid repeat`, not `duplicate`; a repeat of a failed program is its failure, as the run table's
    failures count it; a rejected clone stays `duplicate` (walkthrough s52, finding 11)."""
    repeat = {**candidate(3, 1, [1], 7.0), "duplicate_of": 1}
    failed_repeat = {**candidate(4, 1, [1], None, "exception"), "duplicate_of": 2}
    clone = {**candidate(5, 1, [1], None, "duplicate"), "duplicate_of": 1}
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 7.0), candidate(2, 0, [], None, "exception"), repeat,
                                      failed_repeat, clone])
    loaded = reader.HeuristicRun(run)
    curves = loaded.curves()
    assert curves["outcomes_by_step"] == {"duplicate": [0, 1], "exception": [1, 1], "valid": [1, 0],
                                          "valid repeat": [0, 1]}
    valid = curves["outcomes_by_step"]["valid"] + curves["outcomes_by_step"]["valid repeat"]
    assert sum(valid) == loaded.row()["valid"] == 2
    assert [r["outcome"] for r in loaded.page(0, 10)["rows"]] == ["valid", "exception", "valid repeat", "exception",
                                                                   "duplicate"]
    assert loaded.page(0, 10, outcome="valid repeat")["total"] == 1


def test_an_initial_population_outside_the_budget_is_shown_as_the_run_table_says_it(tmp_path):
    """EoH with eoh.init_in_budget = false charges its 4 initial programs outside T = 12: the dashboard says
    16 of T 12 with 4 outside, as the run table (16 / 12 (+ 4 initial outside T)), not 16 of 16; while it runs
    (no summary yet) its config says the same (walkthrough s52, finding 9)."""
    from coevolve.base.config import build_config
    from coevolve.search.runconfig import RunConfig
    from test_search_loop import run as search_run

    config = build_config(RunConfig, {"run": {"method": "eoh", "task": "fake", "budget": 12, "seed": 0},
                                      "eoh": {"population": 4, "offspring": 3, "init_in_budget": False}})
    summary, _, _ = search_run(tmp_path / "run", config)
    assert (summary.evaluations, summary.budget, summary.outside_budget) == (16, 12, 4)
    row = reader.HeuristicRun(tmp_path / "run").row()
    assert (row["used"], row["budget"]) == (16, 12) and row["outside_budget"] == 4
    (tmp_path / "run" / "summary.json").unlink()  # before its end: the plan in its config
    assert reader.HeuristicRun(tmp_path / "run").row()["outside_budget"] == 4
    plain = reader.HeuristicRun(make_run(tmp_path / "plain", [candidate(1, 0, [], 7.0)])).row()
    assert (plain["budget"], plain["outside_budget"]) == (20, 0)


def test_the_startup_line_counts_the_runs_and_comparisons_found_under_the_directories_given(tmp_path):
    """One folder given holding two runs, and a comparison given beside it: "2 runs and 1 comparison under
    2 directories", not "3 directories" (walkthrough s52, finding 12)."""
    make_run(tmp_path / "runs" / "a", [candidate(1, 0, [], 7.0)])
    make_run(tmp_path / "runs" / "b", [candidate(1, 0, [], 7.0)])
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "table.csv").write_text("kind,task,method\nmethod,tsp_construct,eoh\n")
    dashboard = subprocess.Popen([sys.executable, "-m", "coevolve.cli", "dashboard", str(tmp_path / "runs"),
                                  str(tmp_path / "cmp"), "--port", "0"],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = dashboard.stdout.readline()
    finally:
        dashboard.terminate()  # at once: the stop right after the line is uvicorn's graceful one
        rest = dashboard.communicate(timeout=30)[0]
    assert re.fullmatch(r"coevolve dashboard: http://127\.0\.0\.1:\d+/  \(2 runs and 1 comparison under 2 "
                        r"directories; Ctrl-C stops\)\n", line), line
    assert (dashboard.returncode, rest) == (130, "interrupted\n")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_startup_line_comes_once_a_signal_stops_the_server_gracefully(tmp_path, signum):
    """The line is printed from uvicorn's start-up, with uvicorn's signal handlers in place: a signal sent on
    reading it is a graceful stop (the KeyboardInterrupt comes after the shutdown), not an exception raised
    wherever the start-up happened to be. Announced before uvicorn ran (stop 59's CI), a `kill` on the line
    once left the process running past the test's 30 s wait."""
    from coevolve.dashboard.app import serve

    make_run(tmp_path / "runs" / "a", [candidate(1, 0, [], 7.0)])
    handlers = []

    def announce(line: str) -> None:
        handlers.append(signal.getsignal(signum))
        signal.raise_signal(signum)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):  # a SIGTERM too: after the graceful stop, an interruption
        serve(reader.Registry.open([tmp_path / "runs"]), "127.0.0.1", 0, announce=announce)
    assert [getattr(h, "__name__", h) for h in handlers] == ["handle_exit"]
    assert signal.getsignal(signal.SIGTERM) is before


# -- the archive panel: islands, MAP-Elites and Pareto runs made by the real loop on the fake engine ----------
def archive_run(path: Path, method: str, budget: int = 29, **sections: dict) -> tuple[dict, dict]:
    """A finished run of an archive method (the loop, the method's own snapshot(), the fake engine and
    task), and (its newest snapshot as the method wrote it, its archive as the dashboard reads it)."""
    from search_fakes import FakeTask
    from test_search_methods import DescribedTask, TradeoffTask, fake_config, fake_run

    task = {"islands": FakeTask, "map_elites": DescribedTask, "pareto": TradeoffTask}[method.split("+")[0]]
    fake_run(path, fake_config(method, budget, seed=2, **sections), task())
    newest = max((path / "population").glob("gen_*.json"), key=lambda p: int(p.stem[4:]))
    return json.loads(newest.read_text()), reader.HeuristicRun(path).archive()


def test_an_islands_run_shows_each_islands_size_best_and_resets_from_its_newest_snapshot(tmp_path):
    snap, archive = archive_run(tmp_path / "run", "islands", 29, islands={"islands": 4, "reset_every": 9})
    last = snap["step"]
    assert archive["kind"] == "islands" and archive["error"] is None
    assert (archive["step"], archive["file"], archive["evaluations"]) == (last, f"population/gen_{last:04d}.json", 29)
    objectives = {m["id"]: m["objective"] for m in snap["population"]}
    assert [(i["size"], i["best_id"], i["best"]) for i in archive["islands"]] == [
        (len(ids), ids[0], objectives[ids[0]]) for ids in snap["islands"]]
    # each reset empties the worse half (2 of 4) and refounds it: the panel counts them per island
    assert archive["resets"] == len(snap["resets"]) >= 3
    assert [i["resets"] for i in archive["islands"]] == [sum(n in r["reset"] for r in snap["resets"]) for n in range(4)]
    assert sum(i["resets"] for i in archive["islands"]) == 2 * len(snap["resets"])
    assert [i["reset_steps"] for i in archive["islands"]] == [[r["step"] for r in snap["resets"] if n in r["reset"]]
                                                             for n in range(4)]
    # the best island's best is the run's best; the page links it as it links any candidate
    assert min(i["best"] for i in archive["islands"]) == reader.HeuristicRun(tmp_path / "run").row()["best"]
    with client(tmp_path / "run") as http:
        assert http.get("/api/run/run").json()["archive"] == archive
    # while a run goes on, a newer snapshot is the one shown
    (tmp_path / "run" / "population" / f"gen_{last:04d}.json").unlink()
    assert reader.HeuristicRun(tmp_path / "run").archive()["step"] == last - 1


def test_a_map_elites_grid_is_drawn_cell_by_cell_coloured_by_its_elites_objective(tmp_path):
    snap, archive = archive_run(tmp_path / "two", "map_elites", 40,
                                map_elites={"descriptors": ["level", "lines"], "bins": 5})
    grid = snap["grid"]
    assert archive["kind"] == "grid" and archive["error"] is None and archive["direction"] == "min"
    assert archive["descriptors"] == ["level", "lines"] and archive["hidden"] == [] and archive["bins"] == 5
    assert (archive["filled"], archive["total"], archive["undescribed"]) == (len(grid["cells"]), 25, grid["undescribed"])
    assert [(a["name"], a["edges"][0], a["edges"][-1], len(a["edges"])) for a in archive["axes"]] == [
        ("level", 0.0, 100.0, 6), ("lines", 1.0, 60.0, 6)]  # DescribedTask's level range, the generic lines range
    assert sorted((c["x"], c["y"], c["id"], c["objective"], c["descriptors"]) for c in archive["cells"]) == sorted(
        (*c["cell"], c["id"], c["objective"], c["descriptors"]) for c in grid["cells"])
    # direction-aware: lower is better here, so the lowest objective is the darkest cell (quality 1)
    by_quality = sorted(archive["cells"], key=lambda c: c["quality"])
    assert by_quality[-1]["objective"] == min(c["objective"] for c in grid["cells"]) and by_quality[-1]["quality"] == 1
    assert by_quality[0]["objective"] == max(c["objective"] for c in grid["cells"]) and by_quality[0]["quality"] == 0
    flipped = reader.grid_view(reader.MapElitesSnapshot.model_validate(snap), "max")
    assert {c["id"]: c["quality"] for c in flipped["cells"]} == {c["id"]: round(1 - c["quality"], 4)
                                                                 for c in archive["cells"]}

    snap, archive = archive_run(tmp_path / "one", "map_elites+esopt", 29, map_elites={"descriptors": ["level"], "bins": 8})
    assert len(archive["axes"]) == 1 and {c["y"] for c in archive["cells"]} == {0}  # one row
    assert sorted(c["x"] for c in archive["cells"]) == sorted(c["cell"][0] for c in snap["grid"]["cells"])
    assert archive["total"] == 8

    snap, archive = archive_run(tmp_path / "three", "map_elites", 40,
                                map_elites={"descriptors": ["level", "lines", "branches"], "bins": 3})
    grid = snap["grid"]
    assert archive["hidden"] == ["branches"] and len(archive["axes"]) == 2 and archive["total"] == 27
    # drawn over the first two descriptors: each cell the best elite of those behind it, all of them counted
    behind: dict[tuple, list] = {}
    for c in grid["cells"]:
        behind.setdefault(tuple(c["cell"][:2]), []).append(c)
    assert {(c["x"], c["y"]): (c["id"], c["elites"]) for c in archive["cells"]} == {
        place: (min(cells, key=lambda c: c["objective"])["id"], len(cells)) for place, cells in behind.items()}
    assert archive["filled"] == len(grid["cells"]) == sum(c["elites"] for c in archive["cells"])


def test_a_pareto_front_lists_its_programs_with_the_instances_each_wins(tmp_path):
    snap, archive = archive_run(tmp_path / "run", "pareto", 29)
    front = snap["pareto"]
    assert archive["kind"] == "pareto" and archive["error"] is None
    assert (archive["instances"], archive["unprofiled"]) == (front["instances"], front["unprofiled"]) == (4, 0)
    assert [(w["id"], w["objective"], w["wins"]) for w in archive["front"]] == [
        (w["id"], w["objective"], w["wins"]) for w in front["wins"]]
    assert len(archive["front"]) >= 2 and sum(w["share"] for w in archive["front"]) == pytest.approx(1.0)


def test_an_archive_snapshot_missing_or_broken_is_said_and_other_methods_have_no_panel(tmp_path):
    """No snapshot yet: the panel says so; a snapshot torn by a writer that is not atomic, or with a field
    of the wrong shape: the panel names the file and the field, the run's page is served as ever; a run of
    a method without such an archive has no panel, whatever its snapshots hold."""
    from coevolve.base.config import build_config
    from coevolve.search.runconfig import RunConfig
    from test_search_loop import run as search_run

    search_run(tmp_path / "eoh", build_config(RunConfig, {"run": {"method": "eoh", "task": "fake", "budget": 12,
                                                                  "seed": 0}}))
    assert reader.HeuristicRun(tmp_path / "eoh").archive() is None
    (tmp_path / "eoh" / "population" / "gen_0099.json").write_text('{"step": 99, "popu')
    assert reader.HeuristicRun(tmp_path / "eoh").archive() is None

    archive_run(tmp_path / "fresh", "islands", 12)
    for f in (tmp_path / "fresh" / "population").iterdir():
        f.unlink()
    assert reader.HeuristicRun(tmp_path / "fresh").archive() == {"kind": "islands", "title": "islands", "step": None,
                                                                  "file": None, "error": None}

    snap, _ = archive_run(tmp_path / "torn", "islands", 12)
    step = snap["step"] + 1
    torn = tmp_path / "torn" / "population" / f"gen_{step:04d}.json"
    torn.write_text(json.dumps(snap)[:200])
    archive = reader.HeuristicRun(tmp_path / "torn").archive()
    assert (archive["kind"], archive["step"], archive["file"]) == ("islands", step, f"population/gen_{step:04d}.json")
    assert archive["error"].startswith(f"{torn}: not valid JSON")

    snap, _ = archive_run(tmp_path / "bad", "map_elites", 29, map_elites={"descriptors": ["level", "lines"], "bins": 5})
    broken = tmp_path / "bad" / "population" / f"gen_{snap['step'] + 1:04d}.json"
    cells = snap["grid"]["cells"]
    for damage, field, problem in [({**cells[0], "cell": [7, 0]}, "grid.cells.0.cell", "[7, 0] is no cell of a grid of 5"),
                                   ({**cells[0], "objective": "12.5"}, "grid.cells.0.objective", "Input should be a valid number")]:
        broken.write_text(json.dumps({**snap, "grid": {**snap["grid"], "cells": [damage, *cells[1:]]}}))
        archive = reader.HeuristicRun(tmp_path / "bad").archive()
        assert archive["kind"] == "grid" and archive["file"] == f"population/{broken.name}"
        assert archive["error"].startswith(f"unexpected file content: {broken}: not a valid MapElitesSnapshot: "
                                           f"{field}: {problem}"), archive["error"]
    before = {p: p.read_bytes() for p in (tmp_path / "bad").rglob("*") if p.is_file()}
    with client(tmp_path / "bad") as http:
        page = http.get("/api/run/bad")
        assert page.status_code == 200 and page.json()["archive"]["error"] == archive["error"]
        assert page.json()["best"] == reader.HeuristicRun(tmp_path / "bad").row()["best"] is not None
    assert {p: p.read_bytes() for p in (tmp_path / "bad").rglob("*") if p.is_file()} == before

    # a method the dashboard does not import (a method file, its code not run here): its snapshots tell
    snap, _ = archive_run(tmp_path / "file", "islands", 12)
    config = tmp_path / "file" / "config.toml"
    config.write_text(re.sub(r'method = "islands"', 'method = "/elsewhere/my_islands.py:Mine"', config.read_text()))
    assert reader.HeuristicRun(tmp_path / "file").method == "/elsewhere/my_islands.py:Mine"
    archive = reader.HeuristicRun(tmp_path / "file").archive()
    assert archive["kind"] == "islands" and [i["size"] for i in archive["islands"]] == [len(i) for i in snap["islands"]]
