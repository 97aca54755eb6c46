"""A comparison stopped by one arm says which arm, in one line, without a traceback, and loses nothing
the other arms made:
- an agent arm whose history.jsonl was edited (a generation changed) is refused before the engine plays
  or replays anything, naming the run directory (it was ReplayError's traceback when the arm was scored);
- an agent run whose events.jsonl has a line cut in the middle: `coevolve run --resume` and the
  comparison refuse it before any engine loads, naming the file and line;
- an OpenAI-compatible endpoint that stops answering mid-comparison (a 500, a reply that is not JSON):
  the error line names the run (its directory) and the rerun line follows, exit 1;
- a user's task file whose reference() calls sys.exit(3) while the comparison scores its test sets: the
  one line `coevolve eval` prints for it, exit 2 (it ended the comparison silently with status 3).

No vLLM engine: agent runs on the sudoku FakeEngine (tests/test_agents_es.py), heuristic runs on the
endpoint stub (tests/endpoint_stub.py) with a context-only method, which never starts an engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import endpoint_stub

from coevolve.base.errors import UsageError
from coevolve.cli import main
from coevolve.engine import pool
from coevolve.plan import HELDOUT_SCORES, RunSpec, base_directory, load_compare_config
from test_agents_compare import _tiny
from test_agents_es import FakeEngine
from test_task_code_exits import RULE, heuristic, line_of

MODEL = endpoint_stub.MODEL
stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest


class Resettable(FakeEngine):
    """The fake engine as a comparison uses it (reset after each ES arm); `played` counts its chat calls."""

    played = 0

    def reset(self):
        self.updates = []

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        Resettable.played += 1
        return super().chat(conversations, sampling, seeds, constraints)


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, byte for byte (the writer locks aside: they name their holder)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


@pytest.fixture
def agent_comparison(tmp_path) -> tuple[Path, Path]:
    """A finished agent comparison (base vs esopt, one seed) on the fake engine: its config and folder."""
    config_path = _tiny(tmp_path)
    root = tmp_path / "cmp"
    from coevolve.compare import run_comparison

    run_comparison(load_compare_config(config_path), root, engine=Resettable(), log=lambda line: None)
    return config_path, root


def edit_line(path: Path, number: int, edit) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = edit(lines[number - 1])
    path.write_text("".join(lines))


def test_an_edited_history_is_refused_naming_the_arm_before_the_engine_plays(agent_comparison):
    from coevolve.compare import run_comparison

    config_path, root = agent_comparison
    run_dir = RunSpec("sudoku", "esopt", 8, 0).directory(root)
    history = run_dir / "history.jsonl"
    edit_line(history, 2, lambda line: line.replace('"generation": 1', '"generation": 5'))
    assert '"generation": 5' in history.read_text()
    (base_directory(root, "sudoku", 0) / HELDOUT_SCORES).unlink()  # the base arm would be scored again first
    before = contents(root)
    Resettable.played = 0
    engine = Resettable()
    with pytest.raises(UsageError) as refused:
        run_comparison(load_compare_config(config_path), root, engine=engine, log=lambda line: None)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{run_dir}: "), line
    assert f"{history}: line 2 holds generation 5 where generation 1 was expected" in line, line
    # refused while the comparison is checked: no arm played, no weight moved, not a byte written
    assert Resettable.played == 0 and engine.updates == [] and contents(root) == before


def test_an_edited_history_of_a_scored_arm_found_when_it_is_scored_names_the_arm(agent_comparison):
    """The replay's own refusal (an engine the history cannot replay onto), when the arm is scored, is the
    same one line naming the arm, and the arms scored before it keep their scores."""
    from coevolve.compare import run_comparison

    config_path, root = agent_comparison
    run_dir = RunSpec("sudoku", "esopt", 8, 0).directory(root)
    (run_dir / HELDOUT_SCORES).unlink()
    (base_directory(root, "sudoku", 0) / HELDOUT_SCORES).unlink()

    class OtherNoise(Resettable):
        noise, rank = "lowrank", 4  # the history was recorded in full noise

    with pytest.raises(UsageError) as refused:
        run_comparison(load_compare_config(config_path), root, engine=OtherNoise(), log=lambda line: None)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{run_dir}: "), line
    assert "asks for full noise but the engine runs lowrank rank 4 noise" in line, line
    assert (base_directory(root, "sudoku", 0) / HELDOUT_SCORES).exists()  # scored before: kept


def test_an_agent_runs_damaged_log_is_refused_before_any_engine_loads(agent_comparison, monkeypatch, capsys):
    """A line cut in the middle of an agent run's events.jsonl: `coevolve run --resume` refuses it with one
    line naming the file and line, before an engine is built, writing nothing; so does the comparison."""
    from coevolve.compare import run_comparison

    config_path, root = agent_comparison
    run_dir = RunSpec("sudoku", "esopt", 8, 0).directory(root)
    events = run_dir / "events.jsonl"
    edit_line(events, 2, lambda line: line[: len(line) // 2] + "\n")
    before = contents(root)

    def no_engine(*args, **kwargs):
        pytest.fail("an engine was built for a run whose log is damaged")

    monkeypatch.setattr(pool, "build_engine", no_engine)
    capsys.readouterr()
    code = main(["run", "--resume", str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"coevolve run: error: {events}: line 2"), err
    with pytest.raises(UsageError, match=f"^{events}: line 2"):
        run_comparison(load_compare_config(config_path), root, engine=Resettable(), log=lambda line: None)
    assert contents(root) == before


# ------------------------------------------------------------ heuristic comparisons on an endpoint
def endpoint_comparison(folder: Path, base_url: str, *, task: str = "tsp_construct", seeds: str = "[0, 1]") -> Path:
    path = folder / "cmp.toml"
    path.write_text(f'[compare]\nmethods = ["sample"]\ntasks = ["{task}"]\nbudgets = [2]\nseeds = {seeds}\n'
                    '[sample]\nbatch = 2\npopulation = 2\n[sandbox]\ntimeout_s = 10\nworkers = 1\n'
                    '[test]\nlimit = 2\nworkers = 1\n[context]\nconstrain = false\n'
                    f'[endpoint]\nbase_url = "{base_url}"\nmodel = "{MODEL}"\nretries = 0\ntimeout_s = 30\n'
                    '[model]\npath = "/nonexistent/coevolve-test-model"\n')
    return path


@pytest.mark.parametrize("mode, said", [("e500", "failed 1 times in a row, last: HTTP 500"),
                                        ("badjson", "failed 1 times in a row")])
def test_an_endpoint_that_stops_answering_names_the_run(stub, tmp_path, capsys, mode, said):
    """Seed 0's run finishes on good replies; seed 1's requests fail: its run directory is named."""
    config = endpoint_comparison(tmp_path, stub.base_url)
    out = tmp_path / "out"
    stub.mode, stub.good_first = mode, 2  # one run's step: two requests
    code = main(["compare", str(config), "--out", str(out), "--no-progress"])
    stdout, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err, (code, stdout, err)
    failed = RunSpec("tsp_construct", "sample", 2, 1).directory(out)
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"coevolve compare: error: {failed}: {stub.base_url} {said}"), err
    assert lines[1:] == [f"every finished run is in {out}: continue with `coevolve compare {config} --out {out}` "
                         "once the endpoint answers"], err
    finished = RunSpec("tsp_construct", "sample", 2, 0).directory(out)
    assert json.loads((finished / "summary.json").read_text())["evaluations"] == 2  # the other run stays


def test_a_reference_that_exits_is_one_line_naming_it(stub, tmp_path, monkeypatch, capsys):
    """A file task's reference() runs in the comparison's process when its test sets are scored (here
    only there: the run asks for the training split's, which returns)."""
    monkeypatch.chdir(tmp_path)
    path = heuristic(tmp_path)
    path.write_text(path.read_text().replace(
        "    def reference(self, split, size):\n        return None",
        "    def reference(self, split, size):\n        if split == 'test':\n            sys.exit(3)\n        return None"))
    config = endpoint_comparison(tmp_path, stub.base_url, task="task.py", seeds="[0]")
    config.write_text(config.read_text().replace("[test]\n", "[test]\nsizes = [5]\n"))
    code = main(["compare", str(config), "--out", "out", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    expected = (f"reference() exited the process (sys.exit(3)) at {path}:{line_of(path, 'sys.exit(3)')}, "
                "during reference('test', 5)")
    assert err.startswith("coevolve compare: error: ") and expected in err and err.strip().endswith(RULE), err


def test_an_endpoint_that_stops_answering_an_agent_arm_names_its_run(stub, tmp_path, capsys):
    """A trace2skill arm distils on the [endpoint]; when it fails, the line names the arm's run directory."""
    from coevolve.base.config import dump_toml
    from coevolve.compare import run_comparison
    from test_agents_compare import tiny_raw

    raw = tiny_raw()
    raw["compare"]["methods"] = ["base", "trace2skill"]
    raw["endpoint"] = {"base_url": stub.base_url, "model": MODEL, "retries": 0, "timeout_s": 30}
    path = tmp_path / "agents.toml"
    path.write_text(dump_toml(raw))
    stub.mode = "e500"
    root = tmp_path / "cmp"
    with pytest.raises(RuntimeError) as stopped:  # coevolve.compare.ArmError, which the command prints
        run_comparison(load_compare_config(path), root, engine=Resettable(), log=lambda line: None)
    run_dir = RunSpec("sudoku", "trace2skill", 8, 0).directory(root)
    assert str(stopped.value).startswith(f"{run_dir}: {stub.base_url} failed 1 times in a row, last: HTTP 500"), \
        str(stopped.value)
    assert (base_directory(root, "sudoku", 0) / HELDOUT_SCORES).exists()  # the arm scored before it stays
