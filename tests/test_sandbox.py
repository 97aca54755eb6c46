"""The sandbox against real hostile candidates, in real worker processes.

A tiny TSP task defined here keeps the battery fast and independent of the
task modules; the registry path is covered by test_registry_task_name."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest

from coevolve.sandbox import EvalResult, FailureKind, Sandbox
from tasks.base import InvalidSolution, evaluate_in_process

TINY_TEMPLATE = '''import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    """Nearest unvisited node."""
    return unvisited_nodes[np.argmin(distance_matrix[current_node][unvisited_nodes])]
'''


class TinyTSP:
    """Four 8-city instances; the same calling convention as tsp_construct."""

    name = "tiny_tsp"
    description = "tiny TSP for sandbox tests"
    function_name = "select_next_node"
    template = TINY_TEMPLATE
    direction = "min"
    train = ("train", 8)

    def splits(self) -> dict[str, list[int]]:
        return {"train": [8], "test": [8, 12]}

    def instances(self, split: str, size: int) -> np.ndarray:
        seed = {"train": 1, "test": 2}[split] * 1000 + size
        return np.random.RandomState(seed).rand(4, size, 2)

    def decide(self, fn, instances):
        for coords in instances:
            n = len(coords)
            distances = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
            visited = [0]
            while len(visited) < n:
                unvisited = np.array([i for i in np.argsort(distances[visited[-1]]) if i not in visited])
                choice = fn(visited[-1], 0, unvisited, distances)
                if not isinstance(choice, (int, np.integer)) or isinstance(choice, bool):
                    raise InvalidSolution(f"returned {choice!r}, expected a node index")
                if not 0 <= choice < n or int(choice) in visited:
                    raise InvalidSolution(f"node {choice} is visited or out of range")
                visited.append(int(choice))
            yield np.array(visited, dtype=np.int64)

    def score(self, decisions, instances) -> float:
        lengths = []
        for tour, coords in zip(decisions, instances):
            n = len(coords)
            if not isinstance(tour, np.ndarray) or sorted(tour.tolist()) != list(range(n)) or tour[0] != 0:
                raise InvalidSolution("not a tour")
            distances = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
            lengths.append(distances[tour, np.roll(tour, -1)].sum())
        return float(np.mean(lengths))

    def instance_seconds(self, size: int) -> float:
        return 2.0


def nearest(current_node, destination_node, unvisited_nodes, distance_matrix):
    return unvisited_nodes[np.argmin(distance_matrix[current_node][unvisited_nodes])]


GOOD = TINY_TEMPLATE
GOOD_OBJECTIVE = evaluate_in_process(TinyTSP(), nearest, TinyTSP().instances("train", 8))


def heuristic(body: str, imports: str = "") -> str:
    """A candidate whose select_next_node runs `body`."""
    return (imports + "\n" if imports else "") + (
        "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
    )


@pytest.fixture
def marked_env(monkeypatch):
    """Tag every process the sandbox starts, so leftovers can be found even
    if they escaped the process tree."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv("COEVOLVE_SANDBOX_TEST_MARK", mark)
    return mark


def processes_with_mark(mark: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("COEVOLVE_SANDBOX_TEST_MARK") == mark:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_good_candidate_scores_like_in_process_evaluation():
    with Sandbox(workers=1, timeout_s=10) as sandbox:
        result = sandbox.evaluate(GOOD, TinyTSP())
        assert result.ok, result
        assert result.objective == pytest.approx(GOOD_OBJECTIVE, rel=1e-12)
        assert result.instances == 4 and result.seconds > 0
        other = sandbox.evaluate(GOOD, TinyTSP(), "test", 12)
        expected = evaluate_in_process(TinyTSP(), nearest, TinyTSP().instances("test", 12))
        assert other.objective == pytest.approx(expected, rel=1e-12)


def test_workers_are_reused_across_candidates():
    with Sandbox(workers=1, timeout_s=10) as sandbox:
        sandbox.evaluate(GOOD, TinyTSP())
        first = sandbox.worker_pids()
        for _ in range(3):
            sandbox.evaluate(heuristic("import sys\nsys.modules['numpy'] = None\nreturn unvisited_nodes[0]"), TinyTSP())
        assert sandbox.worker_pids() == first
        # the candidate above poisoned sys.modules in its own child only
        assert sandbox.evaluate(GOOD, TinyTSP()).objective == pytest.approx(GOOD_OBJECTIVE)


def test_a_pool_that_ran_nothing_records_what_candidates_would_run_under():
    """A resumed run can finish without evaluating anything in its process;
    its summary must still say what bounds candidates here, not 'unconfined'."""
    with Sandbox(workers=1) as ran:
        ran.evaluate(GOOD, TinyTSP())
        expected = ran.boundary
    assert expected["memory_limit"]  # at least the rlimit: never empty once a worker started
    with Sandbox(workers=1) as idle:
        assert idle.boundary == expected
        assert idle.worker_pids() == []  # the probe worker is not kept
    closed = Sandbox(workers=1)
    closed.close()
    assert closed.boundary == expected


def test_a_random_candidate_scores_the_same_every_time():
    """Forked children reseed `random` from fresh entropy: without a fixed seed a
    resumed run rescored such a candidate differently (found as a MAP-Elites
    resume that diverged in CI)."""
    rolling = heuristic("import random\nimport numpy\nif numpy.random.rand() < 0.5:\n"
                        "    return unvisited_nodes[0]\nreturn random.choice(list(unvisited_nodes))")
    with Sandbox(workers=2, timeout_s=10) as sandbox:
        scores = {sandbox.evaluate(rolling, TinyTSP()).objective for _ in range(4)}
        shown = {sandbox.run_python("import random, numpy\n(random.random(), numpy.random.rand())").stdout
                 for _ in range(3)}
    assert len(scores) == 1 and len(shown) == 1, (scores, shown)


def test_a_randomised_heuristic_is_judged_by_its_mean_over_the_seeds_and_fails_if_any_seed_fails():
    """[sandbox] seeds = k: the program's generators seeded 0..k-1, one score each, the mean kept; a program
    that fails under one of them fails, saying under which. A module-level random.seed(s) sets the state
    the worker's seed s would: the single scorings the mean must equal."""
    rolling = heuristic("return random.choice(list(unvisited_nodes))", "import random")
    with Sandbox(workers=2, timeout_s=10) as one, Sandbox(workers=2, timeout_s=10, seeds=3) as three:
        singles = [r.objective for r in one.evaluate_many(
            [(f"import random\nrandom.seed({seed})\n" + rolling, TinyTSP(), None, None) for seed in range(3)])]
        assert len(set(singles)) > 1, singles  # the draws differ, else the mean shows nothing
        mean = three.evaluate(rolling, TinyTSP())
        assert mean.ok and mean.objective == pytest.approx(sum(singles) / 3) and mean.seed_objectives == singles
        twice = three.evaluate_many([(rolling, TinyTSP(), None, None)] * 2)
        assert [r.objective for r in twice] == [mean.objective] * 2
        # a program that draws nothing scores as with one seed
        assert three.evaluate(TINY_TEMPLATE, TinyTSP()).objective == one.evaluate(TINY_TEMPLATE, TinyTSP()).objective
        # random.random() is 0.84 first under seed 0, 0.13 under seed 1
        unlucky = heuristic("if FIRST < 0.5:\n    raise ValueError('an unlucky draw')\nreturn unvisited_nodes[0]",
                            "import random\nFIRST = random.random()")
        assert one.evaluate(unlucky, TinyTSP()).ok
        failed = three.evaluate(unlucky, TinyTSP())
        # a failure under seed 0 reads as under one seed: the seed is named only when seed 0 passed
        always = heuristic("raise ValueError('always')")
        assert three.evaluate(always, TinyTSP()).message == one.evaluate(always, TinyTSP()).message
    assert failed.failure == FailureKind.EXCEPTION and "ValueError: an unlucky draw" in failed.message
    assert failed.message.startswith("with the program's random generators seeded 1 (one of 3 seeds): ")
    with pytest.raises(ValueError, match=r"sandbox seeds must be in 1\.\.64, got 0"):
        Sandbox(seeds=0)


class RollingTSP(TinyTSP):
    """TinyTSP whose template draws its next node at random, with a per-instance profile."""

    template = heuristic("return random.choice(list(unvisited_nodes))", "import random")

    def instance_scores(self, decisions, instances) -> list[float]:
        return [self.score([tour], [coords]) for tour, coords in zip(decisions, instances)]


def test_the_template_scored_in_process_under_the_seeds_is_what_the_sandbox_gives_it():
    """The search compares candidates with its template scored in-process (notes, "beat the template",
    MAP-Elites' `wins`): under [sandbox] seeds = k its generators are seeded 0..k-1 as the sandbox seeds a
    candidate's, so a randomised template's mean and profile are the sandbox's; the process's own draws
    are put back."""
    import random

    from tasks.base import mean_profile, template_profile, template_runs

    task = RollingTSP()
    random.seed(123)
    np.random.seed(123)
    before = random.random(), np.random.rand()
    random.seed(123)
    np.random.seed(123)
    runs = template_runs(task, 3)
    assert (random.random(), np.random.rand()) == before
    with Sandbox(workers=2, timeout_s=10, seeds=3) as three:
        scored = three.evaluate(task.template, task)
    objectives = [task.score(*run) for run in runs]
    assert len(set(objectives)) > 1 and objectives == scored.seed_objectives
    assert mean_profile(task, runs) == pytest.approx(scored.profile) == template_profile(task, 3)
    assert template_profile(task, 1) == pytest.approx(mean_profile(task, runs[:1]))


def tour_lengths(decisions, instances) -> list[float]:
    return [float(np.linalg.norm(coords[tour] - coords[np.roll(tour, -1)], axis=-1).sum())
            for tour, coords in zip(decisions, instances)]


def nearest_to_start(coords) -> int:
    return int(np.argsort(np.linalg.norm(coords - coords[0], axis=-1))[1])


class ProfiledTSP(TinyTSP):
    """TinyTSP with a per-instance profile that checks nothing (its checks are all in score()), and no
    score_is_instance_mean: the sandbox calls score() for the verdict and the objective."""

    def instance_scores(self, decisions, instances) -> list[float]:
        return tour_lengths(decisions, instances)


class ScoreRefusesTSP(ProfiledTSP):
    """A check only score() makes: a tour must go first to the city nearest the start."""

    def score(self, decisions, instances) -> float:
        for tour, coords in zip(decisions, instances):
            if int(tour[1]) != nearest_to_start(coords):
                raise InvalidSolution("score() refuses a first step to any city but the nearest")
        return super().score(decisions, instances)


class ScoreRaisesTSP(ProfiledTSP):
    """A score() that breaks on tours its author did not expect (a KeyError)."""

    def score(self, decisions, instances) -> float:
        for tour, coords in zip(decisions, instances):
            {nearest_to_start(coords): "nearest"}[int(tour[1])]  # score-raises-here
        return super().score(decisions, instances)


class ProfileRaisesTSP(ProfiledTSP):
    """An instance_scores() that breaks on tours score() accepts."""

    def instance_scores(self, decisions, instances) -> list[float]:
        return [{nearest_to_start(coords): length}[int(tour[1])]  # profile-raises-here
                for tour, coords, length in zip(decisions, instances, tour_lengths(decisions, instances))]


class MeanOfProfileTSP(ProfileRaisesTSP):
    """The scaffold's shape: score() is the mean of instance_scores(), which holds the checks."""

    def score(self, decisions, instances) -> float:
        return float(np.mean(self.instance_scores(decisions, instances)))


class DoubledTSP(ProfiledTSP):
    """score() and the profile's mean disagree (a bug in the task, not the program's)."""

    def score(self, decisions, instances) -> float:
        return 2 * super().score(decisions, instances)


class FlaggedTSP(ProfiledTSP):
    """score() is declared the mean of instance_scores(): the sandbox never calls it."""

    score_is_instance_mean = True

    def score(self, decisions, instances) -> float:
        raise AssertionError("score() was called although score_is_instance_mean is declared")


class OverriddenFlaggedTSP(FlaggedTSP):
    """A subclass adds a check to score() under the inherited flag: the flag does not cover it."""

    def score(self, decisions, instances) -> float:
        for tour, coords in zip(decisions, instances):
            if int(tour[1]) != nearest_to_start(coords):
                raise InvalidSolution("the subclass's score() refuses a first step to any city but the nearest")
        return float(np.mean(self.instance_scores(decisions, instances)))


FARTHEST_FIRST = heuristic("return unvisited_nodes[-1] if len(unvisited_nodes) == len(distance_matrix) - 1 "
                           "else unvisited_nodes[0]")


def line_of(marker: str) -> int:
    source = Path(__file__).read_text().splitlines()
    return next(i for i, text in enumerate(source, 1) if text.rstrip().endswith(f"# {marker}"))


def test_score_judges_and_instance_scores_gives_the_profile():
    """Without score_is_instance_mean, score() gives the verdict and the objective (a check only it makes
    counts), instance_scores() the profile; what either raises is an `invalid` verdict naming the method
    that raised and the task's line, and where they disagree score() is the objective, the profile kept."""
    instances = TinyTSP().instances("train", 8)
    here = Path(__file__).resolve()
    with Sandbox(workers=1, timeout_s=10) as sandbox:
        good, refused, raised, profile_raised, through, doubled = sandbox.evaluate_many(
            [(GOOD, ProfiledTSP(), None, None), (FARTHEST_FIRST, ScoreRefusesTSP(), None, None),
             (FARTHEST_FIRST, ScoreRaisesTSP(), None, None), (FARTHEST_FIRST, ProfileRaisesTSP(), None, None),
             (FARTHEST_FIRST, MeanOfProfileTSP(), None, None), (GOOD, DoubledTSP(), None, None)])
        # the farthest-first tours are valid tours: only the checks above refuse them
        assert sandbox.evaluate(FARTHEST_FIRST, ProfiledTSP()).ok
        assert sandbox.evaluate(GOOD, ScoreRefusesTSP()).ok and sandbox.evaluate(GOOD, ScoreRaisesTSP()).ok
    assert good.ok and good.objective == pytest.approx(GOOD_OBJECTIVE, rel=1e-12)
    assert good.profile == pytest.approx(tour_lengths(list(TinyTSP().decide(nearest, instances)), instances))
    assert refused.failure is FailureKind.INVALID, refused
    assert refused.message == "invalid solution: score() refuses a first step to any city but the nearest"
    assert raised.failure is FailureKind.INVALID and raised.message.startswith(
        "unusable decisions: score() raised KeyError: "), raised
    assert raised.message.endswith(f"(at {here}:{line_of('score-raises-here')})"), raised.message
    assert profile_raised.failure is FailureKind.INVALID and profile_raised.message.startswith(
        "unusable decisions: instance_scores() raised KeyError: "), profile_raised
    assert profile_raised.message.endswith(f"(at {here}:{line_of('profile-raises-here')})"), profile_raised.message
    # score() raised, on a line in instance_scores(): both are named
    assert through.message.startswith("unusable decisions: score() raised KeyError: "), through
    assert through.message.endswith(f"(at {here}:{line_of('profile-raises-here')}, in instance_scores)")
    assert doubled.ok and doubled.objective == pytest.approx(2 * GOOD_OBJECTIVE, rel=1e-12)
    assert np.mean(doubled.profile) == pytest.approx(GOOD_OBJECTIVE, rel=1e-12)


def test_score_is_instance_mean_scores_by_the_profile_without_calling_score():
    """A task declaring score_is_instance_mean (the ACO tasks: a colony run per instance, once) is scored
    by the mean of its profile and its score() is never called; a subclass that overrides score() under
    the inherited declaration is not covered by it, and its check counts."""
    from tasks.check import declared_instance_mean

    assert declared_instance_mean(FlaggedTSP()) and not declared_instance_mean(OverriddenFlaggedTSP())
    assert not declared_instance_mean(ProfiledTSP())
    with Sandbox(workers=1, timeout_s=10) as sandbox:
        flagged, farthest, overridden, allowed = sandbox.evaluate_many(
            [(GOOD, FlaggedTSP(), None, None), (FARTHEST_FIRST, FlaggedTSP(), None, None),
             (FARTHEST_FIRST, OverriddenFlaggedTSP(), None, None), (GOOD, OverriddenFlaggedTSP(), None, None)])
    for result in (flagged, farthest):
        assert result.ok, result
        assert result.objective == float(np.mean(result.profile)), result
    assert flagged.objective == pytest.approx(GOOD_OBJECTIVE, rel=1e-12)
    assert farthest.objective > flagged.objective
    assert overridden.failure is FailureKind.INVALID and "the subclass's score() refuses" in overridden.message
    assert allowed.ok and allowed.objective == pytest.approx(GOOD_OBJECTIVE, rel=1e-12)


def hostile_battery(outside: str) -> list[tuple[str, str, object]]:
    """(label, code, expected failure or a tuple of acceptable ones); None =
    scores (prints are not a failure)."""
    return [
        ("infinite loop", heuristic("while True:\n    pass"), FailureKind.TIMEOUT),
        ("fork loop", heuristic("while True:\n    os.fork()", "import os"), FailureKind.EXCEPTION),
        ("10 GB allocation", heuristic("block = bytearray(10 * 1024 ** 3)\nreturn unvisited_nodes[0]"),
         FailureKind.MEMORY),
        ("10 GB numpy", heuristic("block = np.ones(10 * 1024 ** 3 // 8)\nreturn unvisited_nodes[0]",
                                  "import numpy as np"), FailureKind.MEMORY),
        ("os.system", heuristic(f"os.system('touch {outside}/system')\nreturn unvisited_nodes[0]", "import os"),
         FailureKind.EXCEPTION),
        ("subprocess", heuristic(f"subprocess.run(['touch', '{outside}/subprocess'])\nreturn unvisited_nodes[0]",
                                 "import subprocess"), FailureKind.EXCEPTION),
        ("write outside", heuristic(f"open('{outside}/open', 'w').write('x')\nreturn unvisited_nodes[0]"),
         FailureKind.EXCEPTION),
        ("pathlib outside", heuristic(f"pathlib.Path('{outside}/pathlib').write_text('x')\nreturn unvisited_nodes[0]",
                                      "import pathlib"), FailureKind.EXCEPTION),
        ("os.open outside", heuristic(f"os.open('{outside}/osopen', os.O_CREAT | os.O_WRONLY)\n"
                                      "return unvisited_nodes[0]", "import os"), FailureKind.EXCEPTION),
        ("remove outside", heuristic(f"os.remove('{outside}/keep')\nreturn unvisited_nodes[0]", "import os"),
         FailureKind.EXCEPTION),
        ("socket", heuristic("socket.create_connection(('127.0.0.1', 9))\nreturn unvisited_nodes[0]",
                             "import socket"), FailureKind.EXCEPTION),
        ("sys.exit", heuristic("sys.exit(0)", "import sys"), FailureKind.CRASH),
        ("sys.exit at import", "import sys\nsys.exit(3)\n" + GOOD, FailureKind.CRASH),
        ("os._exit", heuristic("os._exit(0)", "import os"), FailureKind.CRASH),
        ("segfault", heuristic("ctypes.string_at(0)", "import ctypes"), FailureKind.CRASH),
        ("deep recursion", heuristic("def down(k):\n    return down(k + 1)\nreturn down(0)"), FailureKind.EXCEPTION),
        # Python 3.11 keeps Python frames off the C stack: unbounded recursion
        # exhausts memory or time, whichever comes first
        ("unbounded recursion", heuristic("sys.setrecursionlimit(10 ** 8)\ndef down(k):\n    return down(k + 1) + 1\n"
                                          "return down(0)", "import sys"), (FailureKind.MEMORY, FailureKind.TIMEOUT)),
        ("kill the worker", heuristic("os.kill(os.getppid(), 9)\nreturn unvisited_nodes[0]", "import os"),
         FailureKind.EXCEPTION),
        ("NaN", heuristic("return float('nan')"), FailureKind.INVALID),
        ("None", heuristic("return None"), FailureKind.INVALID),
        ("wrong type", heuristic("return 'node'"), FailureKind.INVALID),
        ("a list", heuristic("return list(unvisited_nodes)"), FailureKind.INVALID),
        ("visited node", heuristic("return current_node"), FailureKind.INVALID),
        ("raises", heuristic("raise ValueError('no idea')"), FailureKind.EXCEPTION),
        ("syntax error", "def select_next_node(a, b, c, d)\n    return c[0]\n", FailureKind.SYNTAX),
        ("missing function", "def choose(a, b, c, d):\n    return c[0]\n", FailureKind.MISSING_FUNCTION),
        ("bad signature", "def select_next_node(a, b):\n    return 1\n", FailureKind.BAD_SIGNATURE),
        # output floods at import time (the heuristic itself runs ~28 times)
        ("100 MB of prints", "for _ in range(100_000):\n    print('x' * 999)\n" + GOOD, None),
        ("100 MB in one write", "import os\nos.write(1, b'y' * 100_000_000)\n" + GOOD, None),
        ("writes its own temp dir", heuristic("open('notes.txt', 'w').write('ok')\nreturn unvisited_nodes[0]"),
         None),
    ]


def test_hostile_battery(tmp_path, marked_env, monkeypatch):
    scratch = tmp_path / "scratch"  # where the workers make candidate temp dirs
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("precious")
    battery = hostile_battery(str(outside))
    jobs = []
    for _, code, _ in battery:
        jobs += [(code, TinyTSP(), None, None), (GOOD, TinyTSP(), None, None)]
    began = time.monotonic()
    with Sandbox(workers=2, timeout_s=3.0, memory_mb=512, output_limit=2000) as sandbox:
        results = sandbox.evaluate_many(jobs)
        for pid in sandbox.worker_pids():
            assert psutil.Process(pid).children() == [], "a candidate process outlived its evaluation"
    elapsed = time.monotonic() - began

    for (label, _, expected), result, after in zip(battery, results[0::2], results[1::2]):
        allowed = expected if isinstance(expected, tuple) else (expected,)
        assert result.failure in allowed, f"{label}: {result}"
        assert after.ok and after.objective == pytest.approx(GOOD_OBJECTIVE), f"good after {label}: {after}"
    by_label = {label: result for (label, _, _), result in zip(battery, results[0::2])}
    assert "PermissionError" in by_label["write outside"].message
    assert "SIGSEGV" in by_label["segfault"].message
    assert "time limit" in by_label["infinite loop"].message
    assert "RecursionError" in by_label["deep recursion"].message
    for label in ("100 MB of prints", "100 MB in one write"):
        assert len(by_label[label].output) < 2000 + 3000, label
    assert sorted(os.listdir(outside)) == ["keep"] and (outside / "keep").read_text() == "precious"
    assert processes_with_mark(marked_env) == []
    assert list(scratch.iterdir()) == [], "temp dirs outlived the sandbox"
    assert elapsed < 60


def test_a_dead_worker_is_a_crash_verdict_and_is_replaced(marked_env):
    sleepy = heuristic("import time\ntime.sleep(30)\nreturn unvisited_nodes[0]")
    with Sandbox(workers=1, timeout_s=20.0) as sandbox:
        sandbox.evaluate(GOOD, TinyTSP())
        (worker,) = sandbox.worker_pids()
        killer = threading.Timer(1.0, os.kill, (worker, 9))
        killer.start()
        result = sandbox.evaluate(sleepy, TinyTSP())
        assert result.failure == FailureKind.CRASH and "worker died" in result.message
        assert sandbox.evaluate(GOOD, TinyTSP()).objective == pytest.approx(GOOD_OBJECTIVE)
        assert sandbox.worker_pids() != [worker]
    assert processes_with_mark(marked_env) == []


def test_orphans_that_escape_the_process_group_are_killed(tmp_path, marked_env):
    # fork through ctypes (past the guard), start a new session (past the
    # group kill), and leave the child sleeping. Confined, the seccomp filter
    # refuses the fork (and the PID namespace would take the child down);
    # unconfined, the subreaper sweep ends it.
    escape = (
        "import ctypes, os, time\n"
        "libc = ctypes.CDLL(None)\n"
        "pid = libc.fork()\n"
        "if pid == 0:\n"
        "    libc.setsid()\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('forked', pid)\n"
    ) + GOOD
    with Sandbox(workers=1, timeout_s=5.0) as sandbox:
        result = sandbox.evaluate(escape, TinyTSP())
        (worker,) = sandbox.worker_pids()
        assert psutil.Process(worker).children() == []
        assert len(processes_with_mark(marked_env)) == 1  # the worker alone
        confined = sandbox.confined
    assert result.ok, result
    assert ("forked -1" in result.output) == confined, result.output
    assert processes_with_mark(marked_env) == []


def test_memory_limit_is_per_candidate():
    with Sandbox(workers=1, timeout_s=5.0, memory_mb=100) as sandbox:
        big = sandbox.evaluate(heuristic("x = np.ones(40_000_000)\nreturn unvisited_nodes[0]",
                                         "import numpy as np"), TinyTSP())
        small = sandbox.evaluate(heuristic("x = np.ones(1_000_000)\nreturn unvisited_nodes[0]",
                                           "import numpy as np"), TinyTSP())
    assert big.failure == FailureKind.MEMORY
    # unvisited_nodes is sorted nearest first: this is nearest neighbour again
    assert small.ok and small.objective == pytest.approx(GOOD_OBJECTIVE)


def test_network_is_isolated_when_root():
    with Sandbox(workers=1, timeout_s=5.0) as sandbox:
        # the socket guard is bypassed on purpose (the type the guard does not
        # replace): only the network namespace is left to stop it
        tool = sandbox.run_python(
            "import socket\n"
            "try:\n    raw = socket.SocketType(socket.AF_INET, socket.SOCK_STREAM)\n    raw.settimeout(1)\n"
            "    raw.connect(('1.1.1.1', 53))\n    print('online')\n"
            "except OSError as exc:\n    print('offline', exc.errno)\n"
        )
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root; only the socket guard applies")
        assert sandbox.network_isolated
    assert tool.ok and tool.stdout.startswith("offline"), tool


def test_run_python_for_agents(tmp_path):
    with Sandbox(workers=1, timeout_s=5.0, output_limit=500) as sandbox:
        shown = sandbox.run_python("x = 21\nprint('half')\nx * 2")
        assert shown.ok and shown.stdout == "half\n42\n"
        error = sandbox.run_python("1 / 0")
        assert error.failure == FailureKind.EXCEPTION and "ZeroDivisionError" in error.error
        assert "[exception]" in error.observation()
        assert sandbox.run_python("print(")
        assert sandbox.run_python("print(").failure == FailureKind.SYNTAX
        assert sandbox.run_python("while True: pass", timeout_s=1.0).failure == FailureKind.TIMEOUT
        assert sandbox.run_python("import sys; sys.exit(2)").failure == FailureKind.CRASH
        flood = sandbox.run_python("for i in range(100000): print(i)")
        assert flood.ok and len(flood.stdout) < 500 + 3000
        target = tmp_path / "agent.txt"
        wrote = sandbox.run_python(f"open({str(target)!r}, 'w').write('x')")
        assert wrote.failure == FailureKind.EXCEPTION and not target.exists()


def test_evaluate_many_keeps_order_and_runs_in_parallel():
    variants = [heuristic(f"return unvisited_nodes[min({k}, len(unvisited_nodes) - 1)]") for k in range(4)]
    expected = []
    for k in range(4):
        def pick(current_node, destination_node, unvisited_nodes, distance_matrix, k=k):
            return unvisited_nodes[min(k, len(unvisited_nodes) - 1)]
        expected.append(evaluate_in_process(TinyTSP(), pick, TinyTSP().instances("train", 8)))
    sleepy = "import time\ntime.sleep(1.0)\n" + GOOD
    with Sandbox(workers=2, timeout_s=10.0) as sandbox:
        results = sandbox.evaluate_many([(code, TinyTSP(), "train", 8) for code in variants])
        sandbox.evaluate_many([(GOOD, TinyTSP(), None, None)] * 2)  # start both workers
        began = time.monotonic()
        sandbox.evaluate_many([(sleepy, TinyTSP(), None, None)] * 2)
        parallel = time.monotonic() - began
    assert [r.objective for r in results] == pytest.approx(expected)
    assert len(set(expected)) > 1
    # each sleepy candidate sleeps 1 s: two workers take one's time, not two
    with Sandbox(workers=1, timeout_s=30.0) as serial:
        serial.evaluate(GOOD, TinyTSP())
        began = time.monotonic()
        serial.evaluate_many([(sleepy, TinyTSP(), None, None)] * 2)
        sequential = time.monotonic() - began
    assert sequential >= 2.0 and parallel < 0.75 * sequential, (parallel, sequential)


def test_bad_input_is_a_clear_error():
    with Sandbox(workers=1) as sandbox:
        with pytest.raises(ValueError, match="no split 'nope'"):
            sandbox.evaluate(GOOD, TinyTSP(), "nope")
        with pytest.raises(ValueError, match="no size 9"):
            sandbox.evaluate(GOOD, TinyTSP(), "train", 9)
        with pytest.raises(ValueError, match="several sizes"):
            sandbox.evaluate(GOOD, TinyTSP(), "test")
        with pytest.raises(ValueError, match="unknown task 'no_such_task'"):
            sandbox.evaluate(GOOD, "no_such_task")
    with pytest.raises(RuntimeError, match="closed"):
        sandbox.evaluate(GOOD, TinyTSP())
    with pytest.raises(ValueError, match="workers"):
        Sandbox(workers=0)


def test_result_round_trips_through_json():
    result = EvalResult(objective=None, failure=FailureKind.TIMEOUT, message="slow", seconds=2.5)
    again = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and not again.ok
    assert EvalResult(objective=1.5, failure=None).ok


def test_results_over_seeds_are_one_result_with_the_mean_profile_and_seed_0s_notes():
    from coevolve.sandbox.results import over_seeds

    first = EvalResult(objective=2.0, failure=None, seconds=1.0, instances=2, profile=[1.0, 3.0],
                       behaviour={"lines": 4.0}, feedback="seed 0's note")
    second = EvalResult(objective=4.0, failure=None, seconds=2.0, instances=2, profile=[3.0, 5.0],
                        behaviour={"lines": 9.0}, feedback="seed 1's note")
    assert over_seeds([first]) is first
    both = over_seeds([first, second])
    assert (both.objective, both.profile, both.seconds, both.seed_objectives) == (3.0, [2.0, 4.0], 3.0, [2.0, 4.0])
    assert EvalResult.from_dict(json.loads(json.dumps(both.to_dict()))) == both
    assert (both.behaviour, both.feedback, both.instances) == ({"lines": 4.0}, "seed 0's note", 2)
    assert over_seeds([first, EvalResult(objective=4.0, failure=None)]).profile is None  # no profile to average


def test_registry_task_name():
    from tasks.registry import list_tasks

    if "tsp_construct" not in list_tasks():
        pytest.skip("tsp_construct is not registered yet")
    from tasks.registry import get_task

    task = get_task("tsp_construct")
    with Sandbox(workers=1, timeout_s=30.0) as sandbox:
        result = sandbox.evaluate(task.template, "tsp_construct")
    assert result.ok and result.instances == 64
    assert result.objective == pytest.approx(evaluate_in_process(task, nearest, task.instances("train", 50)))
