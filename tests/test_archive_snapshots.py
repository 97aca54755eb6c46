"""Archive snapshots (population/gen_NNNN.json) of the islands, MAP-Elites and Pareto methods: one typed
record per method's part (coevolve.base.records), which the method writes through and the dashboard's
archive panel reads through; the file keeps the shape it always had, so a run directory written before
the records still reads. And the dashboard asks an unfinished run's task for its reference in its own
process: a reference() that exits is said on the run's row, not the dashboard's end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.base.records import IslandsSnapshot, MapElitesSnapshot, ParetoSnapshot
from coevolve.dashboard import reader
from test_dashboard import archive_run, candidate, client, forget_built_tasks, make_run
from test_task_code_exits import RULE, heuristic, line_of

MEMBER = {"id": 3, "objective": 4.5, "operator": "e1", "idea": "an idea", "code": "def f():\n    return 1\n"}

# each method's part as the code before the records wrote it (dicts), beside the loop's own keys
OLD = {
    "islands": {"step": 4, "operator": "e1", "evaluations": 12, "population": [MEMBER],
                "islands": [[3], [3, 1]],
                "resets": [{"step": 3, "evaluations": 9, "reset": [1], "from": [0]}]},
    "grid": {"step": 4, "operator": "e1", "evaluations": 12, "population": [MEMBER],
             "grid": {"descriptors": ["level", "lines"], "bins": 5, "ranges": [[0.0, 100.0], [1.0, 60.0]],
                      "cells": [{"cell": [1, 2], "id": 3, "objective": 4.5, "descriptors": [30.0, 25.0]}],
                      "undescribed": 2}},
    "pareto": {"step": 4, "operator": "e1", "evaluations": 12, "population": [MEMBER],
               "pareto": {"instances": 4, "wins": [{"id": 3, "wins": 3, "objective": 4.5},
                                                   {"id": 1, "wins": 1, "objective": 6.0}], "unprofiled": 0}},
}
RECORDS = {"islands": IslandsSnapshot, "grid": MapElitesSnapshot, "pareto": ParetoSnapshot}
METHODS = {"islands": ("islands", {"islands": {"islands": 4, "reset_every": 9}}),
           "grid": ("map_elites", {"map_elites": {"descriptors": ["level", "lines"], "bins": 5}}),
           "pareto": ("pareto", {})}


@pytest.mark.parametrize("key", list(OLD))
def test_an_old_snapshot_reads_through_its_record_and_writes_back_the_same(key):
    """The record reads a snapshot written before it, and writes it back key for key (a reset's "from"
    included, though it is a keyword in Python)."""
    old = OLD[key]
    assert RECORDS[key].model_validate(old).to_json() == old


@pytest.mark.parametrize("key", list(OLD))
def test_a_methods_snapshot_is_its_record_and_keeps_the_files_shape(tmp_path, key):
    """What the real loop wrote for each archive method (the fake engine and task) has the keys of the old
    shape, each value of the record's type, and the dashboard's panel draws it."""
    method, sections = METHODS[key]
    snap, archive = archive_run(tmp_path / "run", method, 29, **sections)
    assert set(snap) == set(OLD[key])
    assert RECORDS[key].model_validate(snap).to_json() == snap
    assert set(snap["population"][0]) == set(MEMBER)
    if key == "islands":
        assert snap["resets"] and all(set(r) == set(OLD[key]["resets"][0]) for r in snap["resets"])
    else:
        part = OLD[key][key]
        assert set(snap[key]) == set(part)
        inner = "cells" if key == "grid" else "wins"
        assert snap[key][inner] and all(set(c) == set(part[inner][0]) for c in snap[key][inner])
    assert archive["kind"] == key and archive["error"] is None


def old_run(path: Path, key: str, snapshot: dict) -> Path:
    """A run directory of `key`'s method, finished by the loop, whose newest snapshot is `snapshot`."""
    method, sections = METHODS[key]
    archive_run(path, method, 12, **sections)
    (path / "population" / "gen_9999.json").write_text(json.dumps(snapshot))
    return path


def test_old_run_directories_snapshots_show_in_the_archive_panel(tmp_path):
    """Snapshots in the old shape, and older ones still (before resets, undescribed and unprofiled
    were kept), are drawn as before."""
    islands = reader.HeuristicRun(old_run(tmp_path / "islands", "islands", OLD["islands"])).archive()
    assert (islands["error"], islands["step"], islands["resets"]) == (None, 9999, 1)
    assert [(i["size"], i["best_id"], i["resets"]) for i in islands["islands"]] == [(1, 3, 0), (2, 3, 1)]
    older = {k: v for k, v in OLD["islands"].items() if k != "resets"}
    islands = reader.HeuristicRun(old_run(tmp_path / "islands2", "islands", older)).archive()
    assert islands["error"] is None and islands["resets"] is None

    grid = reader.HeuristicRun(old_run(tmp_path / "grid", "grid", OLD["grid"])).archive()
    assert (grid["error"], grid["filled"], grid["total"], grid["undescribed"]) == (None, 1, 25, 2)
    assert [(c["x"], c["y"], c["id"]) for c in grid["cells"]] == [(1, 2, 3)]
    older = {**OLD["grid"], "grid": {k: v for k, v in OLD["grid"]["grid"].items() if k != "undescribed"}}
    assert reader.HeuristicRun(old_run(tmp_path / "grid2", "grid", older)).archive()["undescribed"] is None

    front = reader.HeuristicRun(old_run(tmp_path / "pareto", "pareto", OLD["pareto"])).archive()
    assert (front["error"], front["instances"]) == (None, 4)
    assert [(w["id"], w["wins"], w["share"]) for w in front["front"]] == [(3, 3, 0.75), (1, 1, 0.25)]


def test_a_wrong_field_is_named_with_the_records_name(tmp_path):
    """The panel refuses as records.parse does: the file, the record's type, the field."""
    bad = {**OLD["pareto"], "pareto": {**OLD["pareto"]["pareto"], "instances": 4.0}}
    run = old_run(tmp_path / "pareto", "pareto", bad)
    error = reader.HeuristicRun(run).archive()["error"]
    assert error.startswith(f"unexpected file content: {run / 'population' / 'gen_9999.json'}: not a valid "
                            "ParetoSnapshot: pareto.instances: Input should be a valid integer"), error


def run_whose_reference(tmp_path: Path, body: str) -> tuple[Path, str]:
    """An unfinished run (best 6.0) of a problem file whose reference() runs `body`, and the line
    exited() gives for it if it exits."""
    path = heuristic(tmp_path)
    path.write_text(path.read_text() + f"\n    def reference(self, split, size):\n        {body}\n")
    run = make_run(tmp_path / "run", [candidate(1, 0, [], 6.0)])
    (run / "config.toml").write_text((run / "config.toml").read_text().replace('"tsp_construct"', repr(str(path))))
    return run, (f"reference() exited the process ({body}) at {path}:{line_of(path, body)}, "
                 f"during reference('train', 5): {RULE}")


def test_a_reference_that_exits_is_said_on_the_runs_row_and_the_dashboard_goes_on(tmp_path, monkeypatch):
    """An unfinished run's gap needs its task's reference, which the task's own code gives in the
    dashboard's process: a reference() that exits leaves the gap unknown and says why in exited()'s line;
    the runs list and the run's page are served as ever, and the task is asked once."""
    monkeypatch.setattr(reader, "_REFERENCES", {})
    forget_built_tasks()
    run, line = run_whose_reference(tmp_path, "sys.exit(6)")
    try:
        row = reader.HeuristicRun(run).row()
        assert (row["best"], row["gap"], row["reference_unavailable"]) == (6.0, None, line)
        with client(run) as http:
            rows = http.get("/api/runs").json()
            page = http.get("/api/run/run")
            assert page.status_code == 200 and page.json()["reference_unavailable"] == line
        assert line in json.dumps(rows)
    finally:
        forget_built_tasks()


def test_a_reference_that_is_had_leaves_nothing_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_REFERENCES", {})
    forget_built_tasks()
    run, _ = run_whose_reference(tmp_path, "from tasks.base import Reference; return Reference(8.0, 'bound', 'test')")
    try:
        row = reader.HeuristicRun(run).row()
        assert row["reference_unavailable"] is None and row["gap"] == pytest.approx(0.25)
    finally:
        forget_built_tasks()
