"""A config's file paths count from its TOML's folder (coevolve/base/paths.py, coevolve.plan.files_counted)."""

from __future__ import annotations

from pathlib import Path

from coevolve.base.paths import counted, counted_from
from coevolve.plan import files_counted, task_files_counted


def test_relative_paths_count_from_the_base_and_others_stay(tmp_path: Path) -> None:
    assert counted("a/b.py", tmp_path) == str(tmp_path.resolve() / "a" / "b.py")
    assert counted("/abs/x.py", tmp_path) == "/abs/x.py"
    assert counted("", tmp_path) == "" and counted(3, tmp_path) == 3  # left for validation to name
    raw = {"start": {"programs": ["p.py", "", 7]}, "run": {"task": "tsp_construct"}}
    out = counted_from(raw, tmp_path, "start", "programs")
    assert out["start"]["programs"] == [str(tmp_path.resolve() / "p.py"), "", 7]
    assert raw["start"]["programs"] == ["p.py", "", 7], "the tables given are not changed"
    assert counted_from(raw, tmp_path, "skill", "start") is raw  # no such key: as it was
    assert counted_from({"start": "not a table"}, tmp_path, "start", "programs") == {"start": "not a table"}


def test_a_runs_files_and_the_embedded_model_names(tmp_path: Path) -> None:
    raw = {"start": {"programs": ["mine.py"]}, "skill": {"start": "rules"}, "skills": {"paths": ["s"]},
           "model": {"path": "ckpt"}}
    out = files_counted(raw, tmp_path)
    base = tmp_path.resolve()
    assert out == {"start": {"programs": [str(base / "mine.py")]}, "skill": {"start": str(base / "rules")},
                   "skills": {"paths": [str(base / "s")]}, "model": {"path": str(base / "ckpt")}}
    for name in ("", "default", "smollm2-135m-instruct"):
        assert files_counted({"model": {"path": name}}, tmp_path)["model"]["path"] == name
    # react_math's problems_file is annotated Path: a file option; turns is not
    options = task_files_counted({"problems_file": "p.jsonl", "turns": 3}, "react_math", tmp_path)
    assert options == {"problems_file": str(base / "p.jsonl"), "turns": 3}
    assert task_files_counted({"problems_file": "p.jsonl"}, "no_such_task", tmp_path) == {"problems_file": "p.jsonl"}
