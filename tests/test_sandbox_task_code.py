"""The task's own code runs in the sandbox worker itself (building it, drawing instances, scoring a
candidate's decisions): trusted, but it may loop. A score() that never returns is the task's failure,
named with its line, at the job's answer time (not the candidate's "worker stopped answering"), and a
worker whose owner died stops at once instead of spinning on as an orphan."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from test_own_problem import broken, write

# score() loops for the pick 3 only: the template's 0 passes check-task, a candidate's 3 reaches the loop
LOOPING = broken("total += values[index]", "while index == 3:\n                pass\n            total += values[index]")


def test_a_score_that_never_returns_is_the_tasks_failure_naming_its_line(tmp_path, monkeypatch):
    from coevolve.sandbox import Sandbox, pool
    from coevolve.sandbox.results import TaskError
    from tasks.registry import heuristic_task

    problem = write(tmp_path, "problem.py", LOOPING)
    line = LOOPING[:LOOPING.index("while index == 3")].count("\n") + 1
    monkeypatch.setattr(pool, "_WORKER_GRACE_S", 1.0)  # the answer is due 2 x 1 s + 1 s after the job is sent
    task = heuristic_task(str(problem))
    with Sandbox(workers=1, timeout_s=1) as sandbox:
        assert sandbox.evaluate("def pick(values):\n    return 0\n", task).ok
        start = time.monotonic()
        with pytest.raises(TaskError) as overdue:
            sandbox.evaluate("def pick(values):\n    return 3\n", task)
        assert time.monotonic() - start < 3
        assert sandbox.evaluate("def pick(values):\n    return 1\n", task).ok  # the worker goes on
    message = str(overdue.value)
    assert message.startswith(f"task {problem}:ToyPick: scoring the candidate's decisions (score(), "
                              "instance_scores() or feedback()) ran past the answer time, 3 s (2 x "
                              "sandbox.timeout_s + 1 s) in the sandbox worker: StillRunning: still running when "
                              "the answer was due; a loop that never ends? (at "), message
    assert message.endswith(f"{problem}:{line + 1})") or message.endswith(f"{problem}:{line})"), (message, line)


def test_a_worker_whose_owner_died_while_the_task_scored_stops(tmp_path):
    problem = write(tmp_path, "problem.py", LOOPING)
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from coevolve.sandbox import Sandbox
        from tasks.registry import heuristic_task
        with Sandbox(workers=1, timeout_s=30) as sandbox:
            sandbox.evaluate("def pick(values):\\n    return 3\\n", heuristic_task({str(problem)!r}))
        """)], cwd=str(tmp_path.parent))
    try:
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while not workers and time.monotonic() < deadline:  # the worker, once it spins in score()
            time.sleep(0.5)
            workers = [p for p in psutil.Process(owner.pid).children()
                       if "coevolve.sandbox.worker" in " ".join(p.cmdline()) and p.cpu_percent(0.2) > 50]
        assert workers, "no sandbox worker spinning in score()"
    finally:
        owner.kill()  # SIGKILL: no cleanup of its own runs
        owner.wait()
    gone, alive = psutil.wait_procs(workers, timeout=10)
    for process in alive:
        process.kill()
    assert not alive, "the worker spun on after its owner died"
