"""`coevolve eval` and `coevolve tasks`, through the real CLI entry point,
the real sandbox and the real tsp_construct task."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from coevolve.cli import main
from conftest import child_environment
from test_sandbox import processes_with_mark


@pytest.fixture(autouse=True)
def private_reference_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def nearest_file(tmp_path):
    from tasks.registry import get_task

    path = tmp_path / "nearest.py"
    path.write_text(get_task("tsp_construct").template)
    return path


def test_tasks_lists_splits_and_sizes(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^tsp_construct\s+select_next_node\(\)\s+minimise", out, re.M)
    assert re.search(r"^\s+test\s+20, 50, 100, 200, 500, 1000$", out, re.M)
    assert "sudoku  (agent task" in out


def test_tasks_with_specs_lists_every_task_and_then_those(tmp_path, capsys):
    """`coevolve tasks SPEC`, as its --help says: the built-in (and plugin) tasks, then the SPECs."""
    import inspect

    from test_task_registry import ToyPick

    mine = tmp_path / "mine.py"
    mine.write_text("import numpy as np\nfrom tasks.base import InvalidSolution\n\n\n" + inspect.getsource(ToyPick))
    assert main(["tasks", str(mine)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^tsp_construct\s+select_next_node\(\)", out, re.M) and "sudoku  (agent task" in out
    blocks = [line for line in out.splitlines() if not line.startswith(" ")]
    assert blocks[-1] == f"{mine.resolve()}:ToyPick  [file]  pick()  maximise  train on train 5", out
    assert sum(str(mine.resolve()) in line for line in blocks) == 1


def test_eval_run_scores_an_edited_task_file_with_the_runs_copy_and_says_so(tmp_path, capsys):
    """`coevolve eval --run` of a run whose task file was edited since: scored on the source the run
    used (its task_files/ copy), with one note on stderr naming both files."""
    import inspect

    import numpy as np

    from test_task_registry import ToyPick
    from tasks.loader import absolute_spec, clear_cache, record_tasks

    source = "import numpy as np\nfrom tasks.base import InvalidSolution\n\n\n" + inspect.getsource(ToyPick)
    problem = tmp_path / "mine" / "problem.py"
    problem.parent.mkdir()
    problem.write_text(source)
    run = tmp_path / "run"
    run.mkdir()
    spec = absolute_spec(str(problem))
    record_tasks(run, [spec])  # as `coevolve run` records it: tasks.json and task_files/
    (run / "config.toml").write_text(f'[run]\ntask = "{spec}"\n')
    (run / "best.py").write_text("def pick(values):\n    return max(range(len(values)), key=values.__getitem__)\n")
    edited = "return 1000.0 + total / len(instances)"
    problem.write_text(source.replace("return total / len(instances)", edited))
    assert edited in problem.read_text()
    clear_cache()  # a fresh process's lookups
    assert main(["eval", "--run", str(run), "--split", "test", "--size", "9", "--no-reference"]) == 0
    captured = capsys.readouterr()
    (copy,) = (run / "task_files").glob("*.py")
    assert captured.err.splitlines() == [f"note: task file {problem.resolve()} changed since the run; "
                                         f"using the run's copy ({copy})"], captured.err
    best = np.mean([max(values) for values in ToyPick().instances("test", 9)])
    row = re.search(r"^\s+9\s+([\d.]+)", captured.out, re.M)
    assert row and float(row.group(1)) == pytest.approx(best, abs=1e-4), captured.out
    # unchanged (restored): no note
    problem.write_text(source)
    clear_cache()
    assert main(["eval", "--run", str(run), "--split", "test", "--size", "9", "--no-reference"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_eval_prints_objective_gap_valid_and_time(nearest_file, capsys):
    from tasks.base import evaluate_in_process, gap
    from tasks.registry import get_task

    assert main(["eval", str(nearest_file), "--task", "tsp_construct", "--split", "val", "--size", "20"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"^\s+20\s+([\d.]+)\s+([\d.]+)\s+([\d.-]+)%\s+64/64\s+([\d.]+)$", out, re.M)
    assert row, out
    task = get_task("tsp_construct")
    fn_namespace: dict = {}
    exec(task.template, fn_namespace)
    objective = evaluate_in_process(task, fn_namespace["select_next_node"], task.instances("val", 20))
    reference = task.reference("val", 20).value
    assert float(row.group(1)) == pytest.approx(objective, abs=1e-4)
    assert float(row.group(2)) == pytest.approx(reference, abs=1e-4)
    assert float(row.group(3)) == pytest.approx(100 * gap(objective, reference, "min"), abs=0.01)
    assert "reference: best-known, LKH-3" in out


def test_eval_without_size_scores_every_size_of_the_split(nearest_file, capsys):
    assert main(["eval", str(nearest_file), "--task", "tsp_construct", "--split", "val", "--no-reference"]) == 0
    out = capsys.readouterr().out
    sizes = re.findall(r"^\s+(\d+)\s+[\d.]+\s+-\s+-\s+64/64", out, re.M)
    assert sizes == ["20", "50", "100", "200"], out


def test_eval_failure_is_typed_and_exits_1(tmp_path, capsys):
    path = tmp_path / "visits.py"
    path.write_text("def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
                    "    print('choosing', current_node)\n    return current_node\n")
    assert main(["eval", str(path), "--task", "tsp_construct", "--no-reference"]) == 1
    captured = capsys.readouterr()
    assert "FAILED [invalid]" in captured.out and "already visited" in captured.out
    assert "its output:" in captured.out and "│ choosing 0" in captured.out
    assert "1 of 1 sets failed" in captured.err


def test_a_candidates_text_cannot_pose_as_results(tmp_path, capsys):
    """Escape sequences and a forged results row in the candidate's output
    and message reach the terminal stripped and quoted, never as a row."""
    forged_row = "    50        5.6000        5.6755    -1.33%    1000/1000      0.70"
    path = tmp_path / "poser.py"
    path.write_text(
        "import sys\n"
        "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
        f"    print('\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\r\\n{forged_row}')\n"
        f"    raise ValueError('\\x1b[1A\\x1b[2K\\n{forged_row}\\ntotal 4242.0 s')\n")
    assert main(["eval", str(path), "--task", "tsp_construct", "--split", "test", "--size", "50",
                 "--no-reference"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "FAILED [exception]" in out
    lines = out.splitlines()
    assert not any(line.startswith(forged_row) for line in lines), out
    quoted = [line for line in lines if forged_row.strip() in line]
    assert len(quoted) >= 2 and all(line.lstrip().startswith("│") for line in quoted), out
    assert not any(line.startswith("total 4242.0") for line in lines)


def test_eval_seeds_scores_a_randomised_heuristic_by_its_mean(tmp_path, capsys):
    path = tmp_path / "rolling.py"
    path.write_text("import random\n\n\ndef select_next_node(current_node, destination_node, unvisited_nodes, "
                    "distance_matrix):\n    return random.choice(list(unvisited_nodes))\n")
    argv = ["eval", str(path), "--task", "tsp_construct", "--split", "val", "--size", "20", "--no-reference"]
    objectives = []
    for seeds in (1, 3):
        assert main(argv + ["--seeds", str(seeds)]) == 0
        out = capsys.readouterr().out
        assert ("the mean over 3 seeds of its random generators" in out) == (seeds == 3), out
        assert (re.search(r"^        seeds 0\.\.2: min [\d.]+, max [\d.]+, std [\d.]+$", out, re.M) is not None) == (
            seeds == 3), out
        objectives.append(float(re.search(r"^\s+20\s+([\d.]+)", out, re.M).group(1)))
    assert objectives[0] != objectives[1]  # seed 0 alone is not the mean of three draws
    assert main(argv + ["--seeds", "0"]) == 2 and "--seeds must be in 1..64, got 0" in capsys.readouterr().err
    # a run's best.py is scored as the run scored it, under its [sandbox] seeds
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[run]\ntask = "tsp_construct"\n[sandbox]\nseeds = 3\n')
    (run / "best.py").write_text(path.read_text())
    assert main(["eval", "--run", str(run), "--split", "val", "--size", "20", "--no-reference"]) == 0
    assert "the mean over 3 seeds" in capsys.readouterr().out
    (run / "config.toml").write_text('[run]\ntask = "tsp_construct"\n[sandbox]\nseeds = "3"\n')
    assert main(["eval", "--run", str(run), "--split", "val", "--size", "20"]) == 2
    assert "sandbox.seeds must be an integer (got '3')" in capsys.readouterr().err
    # --seeds overrides the run's (its bad value is not even looked at); no [sandbox] seeds: one draw
    assert main(["eval", "--run", str(run), "--split", "val", "--size", "20", "--no-reference", "--seeds", "2"]) == 0
    assert "the mean over 2 seeds" in capsys.readouterr().out
    (run / "config.toml").write_text('[run]\ntask = "tsp_construct"\n')
    assert main(["eval", "--run", str(run), "--split", "val", "--size", "20", "--no-reference"]) == 0
    assert "the mean over" not in capsys.readouterr().out
    assert main(["eval", "--task", "sudoku", "--seeds", "2"]) == 2
    assert "--seeds is for heuristic tasks" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--task", "tsp_construct", "--split", "nope"], "no split 'nope'"),
    (["--task", "tsp_construct", "--split", "test", "--size", "7"], "--size 7"),
    (["--task", "no_such_task"], "unknown task 'no_such_task'"),
    (["--task", "sudoku"], "agent task"),
])
def test_eval_usage_errors_exit_2(nearest_file, capsys, argv, message):
    assert main(["eval", str(nearest_file)] + argv) == 2
    assert message in capsys.readouterr().err


def test_eval_missing_file_exits_2_from_the_console(tmp_path):
    # through a real process, as a user runs it
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from coevolve.cli import main; sys.exit(main())",
         "eval", str(tmp_path / "missing.py"), "--task", "tsp_construct"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 2 and "no such file" in run.stderr


LOOP = ("def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
        "    while True:\n        pass\n")


def test_a_hanging_candidate_fails_fast_naming_the_instance_and_limit(tmp_path, capsys):
    """The per-instance limit, not the 1800 s whole-set limit, stops it."""
    path = tmp_path / "loop.py"
    path.write_text(LOOP)
    assert main(["eval", str(path), "--task", "tsp_construct", "--split", "test", "--size", "50",
                 "--no-reference"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAILED \[timeout\]:\n\s+│ instance 1 of 1000 \(test50\) exceeded the per-instance time limit: "
                     r"more than 3\.01 s of CPU time", out), out


def candidate_started(mark: str, cli: int) -> bool:
    """The candidate itself runs: a process of the sandbox that leads its own session. The candidate
    calls setsid first thing (coevolve/sandbox/child.py); the worker's start-up probe does not, and
    the worker (a session leader too) is the CLI's own child. Counting processes is not enough: the
    probe makes three while the worker is still starting, which is when a Ctrl-C used to land."""
    for process in processes_with_mark(mark):
        try:
            if process.pid != cli and process.ppid() != cli and os.getsid(process.pid) == process.pid:
                return True
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return False


def cli_signal_state(pid: int) -> str:
    """SIGINT in the ignored and blocked masks of the CLI's process and of each of its threads."""
    bit = 1 << (signal.SIGINT - 1)
    states = []
    for status in sorted(Path(f"/proc/{pid}/task").glob("*/status")):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        states.append(f"{fields['Name'].strip()}: ignored={bool(int(fields['SigIgn'], 16) & bit)} "
                      f"blocked={bool(int(fields['SigBlk'], 16) & bit)}")
    return "threads " + "; ".join(states)


def start_as_a_foreground_job(argv: list[str], **options) -> subprocess.Popen:
    """Start a process with SIGINT at its default disposition, as a terminal's foreground job has it.
    A signal ignored at exec stays ignored in the child (POSIX), and Python then installs no
    KeyboardInterrupt handler: a suite started as a background job of a non-interactive shell (`&`,
    where bash ignores SIGINT) handed that on to every `coevolve` it started, which then ran to the
    candidate's time limit on a Ctrl-C (what s26-s28 saw as a suite-only failure). A handled signal is
    reset to the default at exec, so handling it here for the moment of the start is enough."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, **options)
    finally:
        signal.signal(signal.SIGINT, previous)


# how the CLI ends when it was the signal that ended it (not the candidate's own time limit); it takes a
# SIGTERM as a Ctrl-C (coevolve/cli.py): "interrupted", exit 130
SIGNALLED = {"SIGTERM": 130, "SIGKILL": -signal.SIGKILL, "SIGINT": 130}


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "SIGINT"])
def test_nothing_outlives_the_cli_however_it_dies(tmp_path, how):
    """`coevolve eval` on a hanging candidate, killed while the candidate
    spins: its worker and the candidate go with it."""
    import time
    import uuid

    path = tmp_path / "loop.py"
    path.write_text(LOOP)
    mark = uuid.uuid4().hex
    env = child_environment({"COEVOLVE_SANDBOX_TEST_MARK": mark})
    cli = start_as_a_foreground_job([sys.executable, "-m", "coevolve", "eval", str(path), "--task", "tsp_construct",
                                     "--split", "test", "--size", "1000", "--no-reference"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Late in the full suite on 2 cores the candidate once took 42 s to appear and another time more
        # than 60 s, so the wait is generous: this test checks what a kill leaves behind, not start-up time.
        deadline = time.monotonic() + 300
        while not candidate_started(mark, cli.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert candidate_started(mark, cli.pid), "the candidate never started"
        signal_state = cli_signal_state(cli.pid)
        assert "ignored=True" not in signal_state, signal_state  # a Ctrl-C the CLI cannot see tests nothing
        cli.send_signal(getattr(signal, how))
        cli.wait(timeout=60)
        for _ in range(300):
            if not processes_with_mark(mark):
                break
            time.sleep(0.1)
        assert processes_with_mark(mark) == [], f"left behind after {how}: {processes_with_mark(mark)}"
        # the signal ended it: a run that reached the candidate's own time limit first proves nothing
        assert cli.returncode == SIGNALLED[how], (cli.returncode, signal_state, cli.stderr.read().decode()[-500:])
    finally:
        for process in processes_with_mark(mark):
            process.kill()
        if cli.poll() is None:
            cli.kill()
        cli.stderr.close()


def test_a_sandbox_closed_while_its_worker_starts_gives_that_worker_no_job(monkeypatch):
    """Ctrl-C while the pool's thread is still starting a worker: evaluate_many's handler closes the
    sandbox before the new worker is registered. That worker must be stopped, not handed the
    candidate (which then ran to its own time limit, minutes on a loaded machine, before the CLI could
    exit). The close is made to land exactly in that window."""
    from coevolve.sandbox import Sandbox, pool

    sandbox = Sandbox(workers=1, timeout_s=10)
    started = []
    start = pool._WorkerProcess.__init__

    def start_then_close(worker):
        start(worker)
        started.append(worker)
        sandbox.close()  # what the Ctrl-C handler in evaluate_many does, from the main thread

    monkeypatch.setattr(pool._WorkerProcess, "__init__", start_then_close)
    with pytest.raises(RuntimeError, match="closed"):
        sandbox.evaluate_many([(LOOP, "tsp_construct", "test", 1000)])
    assert len(started) == 1 and started[0].process.poll() is not None, "the worker outlived the sandbox"
