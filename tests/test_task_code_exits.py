"""A user's task file whose own code tries to end the process (s53 walkthrough, finding 2): sys.exit(),
`raise SystemExit`, os._exit() or its own `raise KeyboardInterrupt`, in a heuristic task's score(),
__init__() or at import, or in an agent environment's step() or cases(). The trusted side runs that code
in the command's process (loading, check-task, run's and compare's checks before any engine, a
rollout); each such exit is one line naming the method, what it did and the file:line, exit status 2,
no traceback, nothing written, instead of the task's exit status and no word. A real Ctrl-C still
interrupts (exit 130), and a child the task forks still exits as it asks. Light: no engine (a refusal
that slipped through would fail on the missing model, never start one)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coevolve.cli import main

RULE = "a task's code must return a value or raise an exception, not exit"

# A heuristic task with a hole per place its code may exit: {top} at import, {init} in __init__,
# {score} first in score(); helper() for an exit one call deeper.
HEURISTIC = '''import os
import sys

{top}


def helper():
    sys.exit()


class Pick:
    name = "pick"
    description = "Pick one number from a list; larger is better."
    function_name = "pick"
    template = "def pick(values):\\n    return 0\\n"
    direction = "max"
    train = ("train", 5)

    def __init__(self):
        {init}

    def splits(self):
        return {{"train": [5], "test": [5]}}

    def instances(self, split, size):
        return [[(7 * i + 3 * j) % 10 for j in range(size)] for i in range(4)]

    def decide(self, fn, instances):
        for values in instances:
            yield fn(list(values))

    def score(self, decisions, instances):
        {score}
        return sum(values[index] for index, values in zip(decisions, instances)) / len(instances)

    def instance_seconds(self, size):
        return 2.0

    def reference(self, split, size):
        return None
'''

RUN = '''[run]
method = "sample"
task = "task.py"
budget = 2
seed = 0

[sample]
batch = 2
population = 2

[model]
path = "/nonexistent/coevolve-test-model"
'''

COMPARE = '''[compare]
methods = ["sample"]
tasks = ["task.py"]
budgets = [2]
seeds = [0]

[test]
sizes = [5]

[sample]
batch = 2
population = 2

[model]
path = "/nonexistent/coevolve-test-model"
'''

# An agent environment with a hole in step() and in cases().
AGENT = '''import os
import sys
from types import SimpleNamespace


class Echo:
    name = "echo"
    system_prompt = "Repeat the number you are shown."
    stop = ("\\n",)

    def cases(self, split, n, seed=0):
        {cases}
        first = 100 if split == "eval" else 0  # no held-out case a training problem
        return [SimpleNamespace(id=f"{{split}}-{{seed}}-{{i}}", number=first + i) for i in range(n)]

    def reset(self, case):
        return {{"said": None}}, f"The number is {{case.number}}."

    def step(self, state, action_text):
        {step}
        state["said"] = action_text
        return "ok", True

    def max_turns(self, case):
        return 1

    def reward(self, state):
        return 0.0

    def metrics(self, state):
        return {{"progress": 0.0}}
'''


@pytest.fixture(autouse=True)
def _fresh_task_lookups():
    """Each test resolves its task files afresh, as a new process would."""
    from tasks.loader import clear_cache

    clear_cache()
    yield
    clear_cache()


def heuristic(folder: Path, top: str = "", init: str = "pass", score: str = "pass") -> Path:
    path = folder / "task.py"
    path.write_text(HEURISTIC.format(top=top, init=init, score=score))
    return path


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def one_line(err: str) -> str:
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err
    return err.strip()


HEURISTIC_CASES = {  # case: (holes, what the line says, the line it names)
    "score_sys_exit": (dict(score="sys.exit(3)"), "score() exited the process (sys.exit(3)) at {path}:{line}, "
                       "during the template's decide() and score() on train 5", "sys.exit(3)"),
    "score_raise_systemexit": (dict(score="raise SystemExit('bye')"),
                               "score() exited the process (SystemExit('bye')) at {path}:{line}", "SystemExit('bye')"),
    "score_helper_exit": (dict(score="helper()"), "score() exited the process (sys.exit()) at {path}:{line} (in helper)",
                          "    sys.exit()"),
    "score_keyboard_interrupt": (dict(score="raise KeyboardInterrupt"),
                                 "score() exited the process (KeyboardInterrupt raised by the task's code, not a "
                                 "Ctrl-C) at {path}:{line}", "raise KeyboardInterrupt"),
    "import_keyboard_interrupt": (dict(top="raise KeyboardInterrupt"),
                                  "{path}: importing it exited the process (KeyboardInterrupt raised by the task's "
                                  "code, not a Ctrl-C) at {path}:{line}", "raise KeyboardInterrupt"),
    "init_sys_exit": (dict(init="sys.exit(5)"), "building the task: __init__() exited the process (sys.exit(5)) at "
                      "{path}:{line}", "sys.exit(5)"),
}


@pytest.mark.parametrize("case", sorted(HEURISTIC_CASES))
def test_heuristic_task_code_that_exits_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, capsys, case):
    """check-task, run --plan, run and compare --plan: before the fix sys.exit(3) in score() ended each with
    status 3 and no word, and a `raise KeyboardInterrupt` printed "interrupted" (130) as a Ctrl-C does."""
    holes, expected, text = HEURISTIC_CASES[case]
    monkeypatch.chdir(tmp_path)
    path = heuristic(tmp_path, **holes)
    expected = expected.format(path=path, line=line_of(path, text))
    (tmp_path / "run.toml").write_text(RUN)
    (tmp_path / "compare.toml").write_text(COMPARE)
    for argv in (["check-task", "task.py", "--no-sandbox"], ["run", "run.toml", "--plan"],
                 ["run", "run.toml", "--no-progress"], ["compare", "compare.toml", "--plan", "--out", "cmp"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2, (argv, code, out, err)
        line = one_line(err)
        assert line.startswith(f"coevolve {argv[0]}: error: ") and expected in line and line.endswith(RULE), (argv, line)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["compare.toml", "run.toml", "task.py"], argv


def coevolve(cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The command in a process of its own: an os._exit() that slipped through ends that one, not the tests."""
    return subprocess.run([sys.executable, "-m", "coevolve", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_os_exit_in_score_is_one_line_exit_2(tmp_path):
    """os._exit() no `except` sees: before the fix each command ended with status 3 and no word."""
    path = heuristic(tmp_path, score="os._exit(3)")
    (tmp_path / "run.toml").write_text(RUN)
    expected = f"score() exited the process (os._exit(3)) at {path}:{line_of(path, 'os._exit(3)')}"
    for argv in (["check-task", "task.py"], ["run", "run.toml", "--plan"]):
        done = coevolve(tmp_path, *argv)
        assert done.returncode == 2, (argv, done.returncode, done.stdout, done.stderr)
        line = one_line(done.stderr)
        assert expected in line and line.endswith(RULE), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.toml", "task.py"]


def test_os_exit_at_import_is_one_line_exit_2(tmp_path):
    path = heuristic(tmp_path, top="os._exit(0)")
    done = coevolve(tmp_path, "check-task", "task.py")
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert one_line(done.stderr) == (f"coevolve check-task: error: {path}: importing it exited the process "
                                     f"(os._exit(0)) at {path}:{line_of(path, 'os._exit(0)')}: {RULE}")


def test_a_child_the_task_forks_still_exits(tmp_path):
    """os._exit is replaced only for the command's own process: a child forked by score() (as a pool or a
    tool would) ends as it asks, and the check passes."""
    heuristic(tmp_path, score="pid = os.fork()\n        if pid == 0:\n            os._exit(7)\n"
                              "        assert os.waitpid(pid, 0)[1] >> 8 == 7")
    done = coevolve(tmp_path, "check-task", "task.py", "--no-sandbox")
    assert done.returncode == 0 and "pick: passed every check" in done.stdout, (done.stdout, done.stderr)


def test_a_real_ctrl_c_while_the_task_runs_still_interrupts(tmp_path):
    """A Ctrl-C (or a kill) lands on whatever line runs, the task's included: it is told from the task's own
    `raise KeyboardInterrupt` by the signal having come, and stops the command as it always did."""
    heuristic(tmp_path, score="import time; time.sleep(60)")
    for signum in (signal.SIGINT, signal.SIGTERM):
        child = subprocess.Popen([sys.executable, "-m", "coevolve", "check-task", "task.py", "--no-sandbox"],
                                 cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not a background job's SIG_IGN
        try:
            assert "instances: drawn twice" in child.stdout.readline() + child.stdout.readline()
            time.sleep(1.0)  # inside score()'s sleep
            child.send_signal(signum)
            _, err = child.communicate(timeout=30)
        finally:
            child.kill()
            child.wait()
        assert child.returncode == 130 and err.strip() == "interrupted", (signum, child.returncode, err)


def agent(folder: Path, step: str = "pass", cases: str = "pass") -> Path:
    path = folder / "env.py"
    path.write_text(AGENT.format(step=step, cases=cases))
    return path


def test_agent_step_that_raises_systemexit_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    """Before the fix: exit status 4 and no word, from check-task and from run's check."""
    monkeypatch.chdir(tmp_path)
    path = agent(tmp_path, step="raise SystemExit(4)")
    (tmp_path / "run.toml").write_text('[run]\nmethod = "esopt"\ntask = "env.py"\nbudget = 8\n'
                                       '[agent]\npopulation = 2\nbatch = 2\neval_cases = 2\n'
                                       '[model]\npath = "/nonexistent/coevolve-test-model"\n')
    expected = (f"step() exited the process (SystemExit(4)) at {path}:{line_of(path, 'SystemExit(4)')}, during an "
                f"episode of case train-0-0: {RULE}")
    for argv in (["check-task", "env.py"], ["run", "run.toml", "--plan"], ["run", "run.toml", "--no-progress"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2, (argv, code, out, err)
        assert one_line(err).endswith(expected), (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.py", "run.toml"]


def test_agent_step_os_exit_is_one_line_exit_2(tmp_path):
    path = agent(tmp_path, step="os._exit(4)")
    done = coevolve(tmp_path, "check-task", "env.py")
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert one_line(done.stderr).endswith(f"step() exited the process (os._exit(4)) at "
                                          f"{path}:{line_of(path, 'os._exit(4)')}, during an episode of case "
                                          f"train-0-0: {RULE}")


def test_a_rollout_names_an_environment_that_exits(tmp_path):
    """Past the checks (a step() that exits only on some reply), a rollout stops with one line naming the
    method, the line, the case and the turn: an EnvironmentFailure, exit status 2, like a step() that raises."""
    from coevolve.agents.rollout import EnvironmentFailure, drawn_cases, rollout
    from coevolve.engine.base import Completion, Sampling
    from tasks.registry import agent_task

    class Says:
        def chat(self, conversations, sampling, seeds=None):
            return [Completion(text="quit") for _ in conversations]

    path = agent(tmp_path, step="if action_text == 'quit':\n            sys.exit(9)",
                 cases="if split == 'eval':\n            raise KeyboardInterrupt")
    task = agent_task(str(path))
    cases = drawn_cases(task, "train", 1, 0, "agent.batch")
    with pytest.raises(EnvironmentFailure) as caught:
        rollout(Says(), task, cases, Sampling(max_tokens=8))
    assert str(caught.value) == (f"task echo: step() exited the process (sys.exit(9)) at {path}:"
                                 f"{line_of(path, 'sys.exit(9)')}: {RULE} (on case train-0-0, turn 1, given the "
                                 "reply 'quit')")
    with pytest.raises(EnvironmentFailure) as caught:
        drawn_cases(task, "eval", 2, 0, "agent.eval_cases")
    assert str(caught.value) == (f"task echo: cases() exited the process (KeyboardInterrupt raised by the task's "
                                 f"code, not a Ctrl-C) at {path}:{line_of(path, 'raise KeyboardInterrupt')}, during "
                                 f"cases('eval', 2): {RULE} (drawing 2 eval cases for agent.eval_cases)")


def test_eval_names_a_reference_that_exits(tmp_path, monkeypatch, capsys):
    """`coevolve eval` asks the task for its reference value in this process: a reference() that exits
    printed the table's header and ended with the task's status and no word."""
    monkeypatch.chdir(tmp_path)
    path = heuristic(tmp_path)
    path.write_text(path.read_text() + "\n    def reference(self, split, size):\n        sys.exit(6)\n")
    program = tmp_path / "best.py"
    program.write_text("def pick(values):\n    return 0\n")
    assert main(["eval", str(program), "--task", str(path), "--split", "train", "--size", "5"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) == (f"coevolve eval: error: reference() exited the process (sys.exit(6)) at {path}:"
                             f"{line_of(path, 'sys.exit(6)')}, during reference('train', 5): {RULE}")
