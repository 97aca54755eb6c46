"""The sandbox's second pass, class by class, each shown from inside a real
candidate in real workers: what a candidate can read (a root-only file, the
owner's environment), memory outside the address space (memfd), forged
progress against the per-instance budget, a temp dir that is hard to
remove, reports that would inflate the trusted side; and after each hostile
candidate the warm pool scores the next one normally."""

from __future__ import annotations

import os
import textwrap

import pytest

from coevolve.sandbox import FailureKind, Sandbox
from coevolve.sandbox.child import remove_tree
from test_sandbox import GOOD, GOOD_OBJECTIVE, TinyTSP, heuristic
from test_sandbox_boundary import FORGE

SECRET = "sk-coevolve-test-0123456789abcdef"


class AskingTinyTSP(TinyTSP):
    """A task that needs one variable of the owner's environment."""

    sandbox_environment = ("COEVOLVE_TEST_ASKED",)


class QuickTinyTSP(TinyTSP):
    """One CPU second per instance: a spinning candidate fails fast."""

    def instance_seconds(self, size: int) -> float:
        return 1.0


def _scores_normally(sandbox: Sandbox) -> None:
    after = sandbox.evaluate(GOOD, TinyTSP())
    assert after.ok and after.objective == pytest.approx(GOOD_OBJECTIVE), after


@pytest.fixture(params=["as root", "in a user namespace"])
def fresh_sandbox(request, monkeypatch, tmp_path):
    """A confined one-worker pool started after the test set up the owner's
    secrets (an API key in the environment, a root-only file)."""
    if request.param == "in a user namespace":
        monkeypatch.setenv("COEVOLVE_SANDBOX_USERNS", "1")
    monkeypatch.setenv("COEVOLVE_FAKE_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("COEVOLVE_TEST_ASKED", "granted")
    secret_file = tmp_path / "key.txt"
    secret_file.write_text(SECRET)
    os.chmod(secret_file, 0o600)
    sandbox = Sandbox(workers=1, timeout_s=30.0, memory_mb=256, output_limit=4000)
    _scores_normally(sandbox)
    if not sandbox.confined:
        sandbox.close()
        pytest.skip("kernel confinement is unavailable here (see docs/sandbox.md)")
    sandbox.secret_file = str(secret_file)
    sandbox.mode = request.param
    yield sandbox
    sandbox.close()


def test_a_candidate_reads_neither_root_only_files_nor_the_owners_environment(fresh_sandbox):
    if not fresh_sandbox.boundary["hidden_view"]:
        pytest.skip("no tmpfs or pivot_root here: the host-view fallback has its own test below")
    secret_file = fresh_sandbox.secret_file
    spy = heuristic(textwrap.dedent(f'''
        found = []
        for path in ({secret_file!r}, "/proc/self/environ", "/proc/1/environ", "/etc/shadow", "/root/.bashrc"):
            try:
                found.append(path + "=" + open(path, errors="replace").read())
            except OSError as exc:
                found.append(path + ": " + type(exc).__name__)
        found.append(repr(dict(os.environ)))
        found.append("uid=%d" % os.getuid())
        found.append("root=" + ",".join(sorted(os.listdir("/"))))
        raise RuntimeError("\\n".join(found))
        '''), "import os")
    result = fresh_sandbox.evaluate(spy, TinyTSP())
    assert result.failure == FailureKind.EXCEPTION, result
    assert SECRET not in result.message and SECRET not in result.output, result.message
    assert f"{secret_file}: FileNotFoundError" in result.message  # not in its mount view at all
    assert "COEVOLVE_FAKE_API_KEY" not in result.message and "OPENAI_API_KEY" not in result.message
    assert "/etc/shadow: FileNotFoundError" in result.message
    listed = next(line for line in result.message.splitlines() if line.startswith("root="))
    assert "home" not in listed and "boot" not in listed, listed
    if fresh_sandbox.mode == "as root":
        assert "uid=65534" in result.message  # not root: no file of root's with mode 0600 opens
    _scores_normally(fresh_sandbox)


def test_an_unprivileged_candidate_cannot_open_root_only_files_it_can_see(fresh_sandbox):
    """The uid, not only the view: a root-owned 0600 file inside what the
    candidate sees (its own /proc's root-owned entries stand in for any)."""
    if fresh_sandbox.mode != "as root":
        pytest.skip("in a user namespace the candidate keeps the owner's uid (docs/sandbox.md)")
    probe = heuristic(textwrap.dedent('''
        try:
            open("/proc/1/mem", "rb").read(1)
        except OSError as exc:
            raise RuntimeError("refused: " + type(exc).__name__)
        raise RuntimeError("read it")
        '''))
    result = fresh_sandbox.evaluate(probe, TinyTSP())
    assert "refused: PermissionError" in result.message, result


def test_a_task_may_ask_for_a_named_variable(fresh_sandbox):
    shows = heuristic("raise RuntimeError(repr(sorted(os.environ.items())))", "import os")
    result = fresh_sandbox.evaluate(shows, AskingTinyTSP())
    assert "('COEVOLVE_TEST_ASKED', 'granted')" in result.message, result
    assert SECRET not in result.message


def test_memory_held_in_a_memfd_is_counted(fresh_sandbox):
    if fresh_sandbox.boundary["memory_limit"] == ["rlimit"]:
        pytest.skip("no memory cgroup here: memfd is not counted by RLIMIT_AS (docs/sandbox.md)")
    hoard = heuristic(textwrap.dedent('''
        block = b"x" * (1 << 20)
        for _ in range(32):  # 32 x 32 MB (each under the file-size limit): 1 GB, four times the budget
            fd = os.memfd_create("hoard")
            for _ in range(32):
                os.write(fd, block)
        return unvisited_nodes[0]
        '''), "import os")
    result = fresh_sandbox.evaluate(hoard, TinyTSP())
    assert result.failure == FailureKind.MEMORY, result
    assert "cgroup" in result.message
    _scores_normally(fresh_sandbox)


def test_forged_progress_does_not_reset_the_per_instance_budget(fresh_sandbox):
    """Progress is a decision reaching the worker, final once received. A
    candidate that writes the old protocol's one-byte ticks is refused at
    once; one that forges well-formed decisions commits to them (two here,
    then it spins): the budget runs out in the next instance, after about
    one instance's CPU time, and forging more than the set holds is refused."""
    def forger(data: str, count: str) -> str:
        return heuristic(textwrap.dedent(f'''
            import time
            sent = 0
            while True:
                if sent < {count}:
                    sent += 1
                    for fd in range(3, 64):
                        try:
                            os.write(fd, {data})
                        except OSError:
                            pass
                end = time.process_time() + 0.3
                while time.process_time() < end:
                    pass
            '''), FORGE.replace("    os._exit(0)\n", "") + "import os")

    ticks = fresh_sandbox.evaluate(forger("b'.' * 16", "10 ** 9"), QuickTinyTSP())
    assert ticks.failure == FailureKind.CRASH and "unusable" in ticks.message, ticks
    committed = fresh_sandbox.evaluate(forger("frame({'decision': list(range(8))})", "2"), QuickTinyTSP())
    assert committed.failure == FailureKind.TIMEOUT, committed
    assert "instance 3 of 4" in committed.message and "CPU time" in committed.message, committed
    assert committed.seconds < 8.0  # the whole set's deadline is 30 s
    flood = fresh_sandbox.evaluate(forger("frame({'decision': list(range(8))})", "10 ** 9"), QuickTinyTSP())
    assert flood.failure == FailureKind.CRASH and "more than 4 decisions" in flood.message, flood
    _scores_normally(fresh_sandbox)


def test_a_spinning_instance_is_stopped_by_the_kernels_accounting(fresh_sandbox):
    spinner = heuristic("while True:\n    pass")
    result = fresh_sandbox.evaluate(spinner, QuickTinyTSP())
    assert result.failure == FailureKind.TIMEOUT, result
    assert "instance 1 of 4" in result.message and "CPU time" in result.message
    assert result.seconds < 8.0


def test_thousands_of_nested_directories_do_not_break_the_cleanup(fresh_sandbox):
    burrow = heuristic(textwrap.dedent('''
        global DUG
        if not DUG:
            DUG = True
            for _ in range(5000):
                libc.mkdir(b"d", 0o700)  # libc: the Python guards resolve every path
                libc.chdir(b"d")
        return unvisited_nodes[np.argmin(distance_matrix[current_node][unvisited_nodes])]
        '''), "import ctypes\nimport numpy as np\nlibc = ctypes.CDLL(None)\nDUG = False")
    result = fresh_sandbox.evaluate(burrow, TinyTSP())
    assert result.ok and result.objective == pytest.approx(GOOD_OBJECTIVE), result
    _scores_normally(fresh_sandbox)


def test_remove_tree_needs_no_recursion_and_never_raises(tmp_path, caplog):
    """The fallback cleanup (no hidden view): a deep chain of directories on
    the host (deeper than Python's recursion limit) goes without recursion;
    one it cannot remove within its time budget is logged, never raised."""
    root = tmp_path / "cand"
    root.mkdir()
    cwd = os.getcwd()
    try:  # relative steps: absolute paths stop at PATH_MAX
        os.chdir(root)
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
        with open("file", "w") as handle:
            handle.write("x")
        os.symlink("/", "link-out")
    finally:
        os.chdir(cwd)
    try:
        remove_tree(str(root), budget_s=0.0)
        assert root.exists() and "could not remove the temp dir" in caplog.text
    finally:
        remove_tree(str(root))  # also what keeps pytest's own (recursive) clean-up working
    assert not root.exists()
    remove_tree(str(tmp_path / "never-there"))


def test_the_trusted_side_refuses_inflating_and_malformed_reports(fresh_sandbox):
    forge = FORGE
    cases = {
        # a few MB of tiny nested items: refused from the header, before any decoding
        "tiny items": forge + "forge(frame({'loaded': True}) + frame({'decision': [[]] * 1_500_000}))\n",
        # a decision far bigger than any tour of 8 cities
        "huge decision": forge + "forge(frame({'loaded': True}) + frame({'decision': 0}, b'x' * (8 << 20)))\n",
        "malformed placeholder": forge + "forge(frame({'loaded': True}) "
                                         "+ frame({'decision': {'__array__': [0, ['<i8'], [1]]}}, b'x' * 8))\n",
        "loaded twice": forge + "forge(frame({'loaded': True}) + frame({'loaded': True}))\n",
        "truncated frame": forge + "forge(frame({'loaded': True})[:-3])\n",
    }
    for label, code in cases.items():
        result = fresh_sandbox.evaluate(code, TinyTSP())
        assert result.failure == FailureKind.CRASH, (label, result)
        assert "the candidate's report is unusable" in result.message, (label, result.message)
        assert "outside the candidate" not in result.message
        _scores_normally(fresh_sandbox)


def test_the_record_says_what_is_in_force(fresh_sandbox):
    boundary = fresh_sandbox.boundary
    assert boundary["confined"] and isinstance(boundary["hidden_view"], bool)
    assert boundary["memory_limit"] and set(boundary["memory_limit"]) <= {"cgroup v1", "cgroup v2", "rlimit"}


def test_published_programs_score_in_the_sandbox_exactly_as_in_process():
    """The paper's TSP, KP and ASP programs through the stronger boundary
    (hidden view, unprivileged uid, memory cgroup, streamed decisions) give
    the very objective the whole evaluator gives in one process, which the
    task tests pin to the published values."""
    import warnings

    from paper_programs import PROGRAMS, load
    from tasks.base import evaluate_in_process
    from tasks.registry import get_task

    jobs, expected = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # kp rep 1 divides by zero, as published
        for path in sorted(PROGRAMS.glob("*_rep1.py")):
            name = {"tsp": "tsp_construct", "kp": "kp_construct", "asp": "asp"}.get(path.name.split("_")[0])
            if name is None:
                continue
            task = get_task(name)
            fn = load(path, task.function_name)
            expected.append(evaluate_in_process(task, fn, task.instances(*task.train)))
            jobs.append((path.read_text(), name, None, None))
    # the Agentic-ESOpt EoH+ESOpt TSP rep1 program (tests/test_tasks_construct.py pins it to 6.5107)
    reflected = ("import numpy as np\n\n"
                 "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
                 "    score = 2 * distance_matrix[current_node][unvisited_nodes] "
                 "- distance_matrix[destination_node][unvisited_nodes]\n"
                 "    return unvisited_nodes[np.argmin(score)]\n")
    namespace: dict = {}
    exec(reflected, namespace)
    tsp = get_task("tsp_construct")
    expected.append(evaluate_in_process(tsp, namespace["select_next_node"], tsp.instances(*tsp.train)))
    jobs.append((reflected, "tsp_construct", None, None))
    assert len(jobs) == 3
    with Sandbox(workers=2, timeout_s=300.0) as sandbox:
        results = sandbox.evaluate_many(jobs)
    assert [r.objective for r in results] == expected, results


def test_in_the_host_view_fallback_the_uid_keeps_root_only_files_closed(tmp_path, monkeypatch):
    """Where the hidden view is unavailable the candidate sees the host's
    tree read-only; its unprivileged uid still cannot open a root-owned
    0600 file, while its own temp dir stays writable."""
    if os.geteuid() != 0:
        pytest.skip("the candidate's own uid needs a worker with root")
    monkeypatch.setenv("COEVOLVE_SANDBOX_VIEW", "host")
    monkeypatch.setenv("COEVOLVE_FAKE_API_KEY", SECRET)
    secret_file = tmp_path / "key.txt"
    secret_file.write_text(SECRET)
    os.chmod(secret_file, 0o600)
    os.chmod(tmp_path, 0o755)
    spy = heuristic(textwrap.dedent(f'''
        open("mine.txt", "w").write("ok")
        try:
            leaked = open({str(secret_file)!r}).read()
        except OSError as exc:
            leaked = type(exc).__name__
        raise RuntimeError(open("mine.txt").read() + " " + leaked + " " + repr(dict(os.environ)))
        '''), "import os")
    with pytest.warns(RuntimeWarning, match="whole file system read-only"):
        sandbox = Sandbox(workers=1, timeout_s=30.0, memory_mb=256)
        result = sandbox.evaluate(spy, TinyTSP())
    try:
        if not sandbox.confined:
            pytest.skip("kernel confinement is unavailable here")
        assert sandbox.boundary["hidden_view"] is False
        assert "ok PermissionError" in result.message, result
        assert SECRET not in result.message and "COEVOLVE_FAKE_API_KEY" not in result.message
        _scores_normally(sandbox)
    finally:
        sandbox.close()


def test_decoding_a_frame_costs_a_bounded_multiple_of_it():
    """The worst shapes that fit a frame's JSON limit (tiny nested items)
    and a full blob: the decoder's peak stays within twice the blob plus a
    constant, whatever the candidate packs into the 64 KB of JSON."""
    import json
    import struct
    import tracemalloc

    from coevolve.sandbox import wire
    from coevolve.sandbox.child import DOCUMENT_LIMIT

    blob = bytes(1 << 20)
    room = DOCUMENT_LIMIT - 64
    shapes = {"empty lists": [[]] * (room // 3), "empty dicts": [{}] * (room // 3),
              "zeros": [0] * (room // 2), "nested": [[[[[[]]]]]] * (room // 13)}
    for label, tree in shapes.items():
        document = json.dumps({"decision": tree, "array": {"__array__": [0, "<i8", [len(blob) // 8]]}},
                              separators=(",", ":")).encode()
        assert len(document) <= DOCUMENT_LIMIT, label
        frame = struct.pack("!QQ", len(document), len(blob)) + document + blob
        tracemalloc.start()
        wire.decode(frame, limit=len(frame))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 2 * len(blob) + 64 * DOCUMENT_LIMIT, (label, peak)
