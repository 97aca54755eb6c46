"""A user's task whose own code tries to end the process (sys.exit, os._exit, its own KeyboardInterrupt)
where the command runs it in its own process past the checks: `coevolve tasks`, `coevolve eval` and `coevolve compare
--plan` asking splits() (and the plan's instances()), the sandbox pool asking splits() for a job, and a
run's loop asking the template's score() and reference() as it ends. Each stops the command with one
line naming the method, the file:line and the call, exit status 2, instead of the task's status and no
word; a run's directory keeps its finished steps and resumes once the file is fixed. The tasks are
tests/test_task_code_exits.py's; a run asks the stub endpoint (tests/endpoint_stub.py), no engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import endpoint_stub
import pytest
import test_task_code_exits
from endpoint_stub import MODEL
from test_task_code_exits import COMPARE, RULE, heuristic, line_of, one_line

from coevolve.cli import main
from coevolve import plan
from coevolve.sandbox import Sandbox
from tasks.loader import TaskExited, clear_cache, exited, module_name
from tasks.registry import heuristic_task

# their fixtures, found by pytest here: the stub endpoint, no API key, task files resolved afresh
stub, no_key = endpoint_stub.stub, endpoint_stub.no_key
_fresh_task_lookups = test_task_code_exits._fresh_task_lookups

# appended to the task's class: a method defined again replaces the first
SPLITS = "\n    def splits(self):\n        {exit}\n"
REFERENCE = "\n    def reference(self, split, size):\n        {exit}\n"
# score() that exits only when the run's loop calls it (the template's score as the run ends): the checks
# before the run call it too, and must pass
LOOP_SCORE = '''
    def score(self, decisions, instances):
        import traceback
        if any(frame.filename.endswith("loop.py") for frame in traceback.extract_stack()):
            {exit}
        return sum(values[index] for index, values in zip(decisions, instances)) / len(instances)
'''


def task_with(folder: Path, method: str, exit: str) -> Path:
    path = heuristic(folder)
    path.write_text(path.read_text() + method.format(exit=exit))
    return path


def run_toml(folder: Path, base_url: str) -> None:
    (folder / "run.toml").write_text(f'[run]\nmethod = "sample"\ntask = "task.py"\nbudget = 2\nseed = 0\n'
                                     f'[sample]\nbatch = 2\npopulation = 2\n[context]\nconstrain = false\n'
                                     f'[endpoint]\nbase_url = "{base_url}"\nmodel = "{MODEL}"\n')


def events(out: Path) -> list[str]:
    return [json.loads(line)["type"] for line in (out / "events.jsonl").read_text().splitlines()]


EXITS = {"sys.exit(3)": "sys.exit(3)", "raise KeyboardInterrupt":
         "KeyboardInterrupt raised by the task's code, not a Ctrl-C"}


@pytest.mark.parametrize("exit", sorted(EXITS))
def test_splits_that_exits_is_one_line_for_tasks_and_compare_plan(tmp_path, monkeypatch, capsys, exit):
    """Before: `coevolve tasks task.py`, `coevolve compare --plan` and `coevolve eval` ended with status 3 and no word (a
    KeyboardInterrupt: "interrupted", 130, as a Ctrl-C)."""
    monkeypatch.chdir(tmp_path)
    path = task_with(tmp_path, SPLITS, exit)
    (tmp_path / "compare.toml").write_text(COMPARE)
    expected = f"splits() exited the process ({EXITS[exit]}) at {path}:{line_of(path, exit)}: {RULE}"
    for argv in (["tasks", "task.py"], ["compare", "compare.toml", "--plan", "--out", "cmp"],
                 ["eval", "task.py", "--task", "task.py"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2, (argv, code, out, err)
        assert one_line(err) == f"coevolve {argv[0]}: error: {expected}", argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare.toml", "task.py"]


def test_os_exit_in_splits_is_one_line_for_tasks(tmp_path):
    """os._exit, which no `except` sees: before, the process ended with status 3 and no word."""
    path = task_with(tmp_path, SPLITS, "os._exit(3)")
    done = subprocess.run([sys.executable, "-m", "coevolve", "tasks", "task.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert one_line(done.stderr) == (f"coevolve tasks: error: splits() exited the process (os._exit(3)) at "
                                     f"{path}:{line_of(path, 'os._exit(3)')}: {RULE}")


def test_the_plans_instances_that_exit_name_the_set(tmp_path):
    """The plan's test-set lines draw a set the checks did not (here, every test set's draw exits)."""
    path = heuristic(tmp_path)
    path.write_text(path.read_text().replace("    def instances(self, split, size):\n",
                                             "    def instances(self, split, size):\n"
                                             "        if split == 'test':\n            sys.exit(4)\n"))
    (tmp_path / "compare.toml").write_text(COMPARE)
    with pytest.raises(TaskExited) as caught:
        plan.test_set_lines(plan.load_compare_config(tmp_path / "compare.toml"))
    assert exited(caught.value) == (f"instances() exited the process (sys.exit(4)) at {path}:"
                                    f"{line_of(path, 'sys.exit(4)')}, during instances('test', 5): {RULE}")


def test_the_sandbox_pool_names_a_splits_that_exits(tmp_path):
    """The pool asks splits() in the caller's process before it sends a job: before, sys.exit(3) ended it."""
    path = task_with(tmp_path, SPLITS, "sys.exit(3)")
    task = heuristic_task(str(path))
    with Sandbox(workers=1, timeout_s=10) as sandbox, pytest.raises(TaskExited) as caught:
        sandbox.evaluate("def pick(values):\n    return 0\n", task)
    assert exited(caught.value) == (f"splits() exited the process (sys.exit(3)) at {path}:"
                                    f"{line_of(path, 'sys.exit(3)')}: {RULE}")


def test_a_run_whose_reference_exits_stops_with_one_line_and_resumes(stub, tmp_path, monkeypatch, capsys):
    """reference(), asked as the run ends: before, the run ended with status 3 and no word. Its steps are
    kept: fixed, the file is accepted with --task-changed and the run ends without asking a step again."""
    monkeypatch.chdir(tmp_path)
    path = task_with(tmp_path, REFERENCE, "sys.exit(3)")
    run_toml(tmp_path, stub.base_url)
    assert main(["run", "run.toml", "--out", "out", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (f"coevolve run: error: reference() exited the process (sys.exit(3)) at "
                                            f"{path}:{line_of(path, 'sys.exit(3)')}, during reference('train', 5): "
                                            f"{RULE}")
    logged = events(tmp_path / "out")
    assert "step" in logged and "end" not in logged, logged
    asked = stub.chats
    path.write_text(path.read_text().replace("sys.exit(3)", "return None  # fixed"))
    clear_cache()
    monkeypatch.delitem(sys.modules, module_name(path))  # imported once per process: a new one reads the fix
    assert main(["run", "--resume", "out", "--task-changed", "--no-progress"]) == 0, capsys.readouterr().err
    assert events(tmp_path / "out")[-1] == "end" and stub.chats == asked


@pytest.mark.parametrize("method,called,during", [
    (LOOP_SCORE, "score()", "the template's score() on train 5"),
    (REFERENCE, "reference()", "reference('train', 5)"),
], ids=["template_score", "reference"])
def test_a_run_whose_task_os_exits_in_the_loop_is_one_line(stub, tmp_path, method, called, during):
    """The template's score() and reference(), run in the loop as the run ends: before, os._exit(3) ended
    the process with status 3 and no word."""
    path = task_with(tmp_path, method, "os._exit(3)")
    run_toml(tmp_path, stub.base_url)
    done = subprocess.run([sys.executable, "-m", "coevolve", "run", "run.toml", "--out", "out", "--no-progress"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"coevolve run: error: {called} exited the process (os._exit(3)) at {path}:{line_of(path, 'os._exit(3)')}, "
        f"during {during}: {RULE}")
    assert "step" in events(tmp_path / "out")


def test_tasks_lists_the_other_plugins_past_one_whose_splits_exits(tmp_path, monkeypatch, capsys):
    """`coevolve tasks` lists every plugin past a broken one: one whose splits() exits is its one line
    (exit status 2 at the end), as one that cannot be imported is. Before: the listing ended there, status 3."""
    site = tmp_path / "site"
    for package, method in (("exitplugin", SPLITS.format(exit="sys.exit(3)")), ("fineplugin", "")):
        task_with(tmp_path, method, "")
        (site / package).mkdir(parents=True)
        (tmp_path / "task.py").rename(site / package / "__init__.py")
    info = site / "pickplugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pickplugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[coevolve.tasks]\nexiting_pick = exitplugin:Pick\n"
                                           "fine_pick = fineplugin:Pick\n")
    monkeypatch.syspath_prepend(str(site))
    clear_cache()  # the entry points scanned afresh, as a new process's
    assert main(["tasks"]) == 2
    out, err = capsys.readouterr()
    assert "fine_pick  [plugin]  pick()" in out and "exiting_pick" not in out, out
    path = site / "exitplugin" / "__init__.py"
    assert one_line(err) == (f"coevolve tasks: error: splits() exited the process (sys.exit(3)) at {path}:"
                             f"{line_of(path, 'sys.exit(3)')}: {RULE}")
