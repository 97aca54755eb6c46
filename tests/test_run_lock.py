"""One writer per run directory: `coevolve run --resume DIR` while another process writes DIR, or a second
`coevolve compare` on the same --out, is refused with one line naming the writer, before anything is written
or any engine loads; a SIGKILLed writer leaves no stale lock (the kernel drops its flock); readers
(the dashboard, `coevolve eval`, RunStore.writer) never hold it; `coevolve report` holds it only while it
writes a finished run's or comparison's files (tests/test_store_closing.py).

The writers here are real processes: a helper that holds the directory as `coevolve run --resume` and
`coevolve compare` do and then sleeps, and the real CLI as the second writer. The run under test asks an
[endpoint] nobody serves, so a second writer that the lock failed to stop ends at the endpoint's probe,
never at an engine. A run killed and resumed in this process uses the fake engine (tests/search_fakes.py),
as tests/test_resume_safety.py does."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_environment
from coevolve.base.errors import UsageError
from coevolve.cli import main
from coevolve.engine import pool
from coevolve.runstore import LOCK, RunStore, hold_directory, read_jsonl, writer_of
from search_fakes import FakeEngine

ROOT = Path(__file__).resolve().parents[1]
SINCE = r"since \d\d:\d\d"


def two_writers(head: str, directory: Path, pid: int, then: str) -> str:
    """The pattern of the line refusing a second writer of `directory` held by process `pid`: `head`, then
    who holds it and since when, then `then`, what to do once it is gone."""
    return (re.escape(f"{head}{directory} is being written by another process (pid {pid} on {socket.gethostname()}, ")
            + SINCE + re.escape(f"): wait for it, or stop it, then {then}"))
# an endpoint no one serves (the discard port): a resume the lock did not stop is refused at its probe
RUN_TOML = ('[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 6\n[sample]\nbatch = 3\n'
            '[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "nobody"\n')

# holds DIR as the CLI's writers do (argv: "run" DIR, or "compare" DIR), then sleeps until killed;
# with "fork", a forked child sleeps too and outlives the holder
HOLDER = """
import os, sys, time
from coevolve.runstore import RunStore, hold_directory
kind, directory = sys.argv[1], sys.argv[2]
if kind == "run":
    store = RunStore.open_run(directory, write=True)
else:
    hold_directory(directory, "run the comparison again")
child = os.fork() if "fork" in sys.argv[3:] else None
if child == 0:
    time.sleep(300)
    os._exit(0)
print("held" if child is None else f"held {child}", flush=True)
time.sleep(300)
"""


def start_holder(kind: str, directory: Path, *extra: str) -> subprocess.Popen:
    """The holder, once it holds `directory`; `holder.child`: the pid of its forked child (None: none)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, kind, str(directory), *extra], cwd=ROOT,
                              env=child_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = holder.stdout.readline().split()
    assert line[:1] == ["held"], " ".join(line) + holder.stderr.read()
    holder.child = int(line[1]) if len(line) > 1 else None
    return holder


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


def coevolve(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m coevolve ARGV` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "coevolve", *argv], cwd=ROOT, env=child_environment(),
                          capture_output=True, text=True, timeout=timeout)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def endpoint_run(directory: Path) -> Path:
    RunStore.create(directory, RUN_TOML).close()  # closed: this process does not write it
    return directory


def test_a_resume_while_another_process_writes_the_run_is_refused_before_anything(tmp_path):
    run = endpoint_run(tmp_path / "r")
    holder = start_holder("run", run)
    try:
        before = snapshot(tmp_path)
        done = coevolve("run", "--resume", str(run), "--no-progress")
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert re.fullmatch(two_writers("coevolve run: error: ", run, holder.pid, f"`coevolve run --resume {run}`"),
                            lines[0]), lines[0]
        assert snapshot(tmp_path) == before, "a refused resume wrote files"
        # its plan, a report and RunStore.writer only read: none is refused, none holds the lock
        assert coevolve("run", "--resume", str(run), "--plan").returncode == 0
        report = coevolve("report", str(run))
        # and says the run is still going, not to resume it (which would be a second writer)
        assert report.returncode == 2 and f"{run} is still running (pid {holder.pid} on " in report.stderr, report.stderr
        assert "--resume" not in report.stderr and "being written" not in report.stderr, report.stderr
        assert re.fullmatch(rf"pid {holder.pid} on {re.escape(socket.gethostname())}, {SINCE}",
                            RunStore(run).writer() or "")
        assert snapshot(tmp_path) == before
        # in this process too (another process than the holder's)
        with pytest.raises(UsageError, match="is being written by another process"):
            RunStore.open_run(run, write=True)
        assert holder.poll() is None
    finally:
        stop(holder)
    assert writer_of(run) is None


class Interrupting(FakeEngine):
    """Ctrl-C during the run's second generation: its first step is logged, the rest is not."""

    def chat(self, *args, **kwargs):
        if self.calls:
            raise KeyboardInterrupt
        return super().chat(*args, **kwargs)

    def close(self) -> None:
        pass


class Closing(FakeEngine):
    def close(self) -> None:
        pass


def test_a_sigkilled_writer_leaves_the_run_resumable_even_with_a_forked_child_alive(tmp_path, monkeypatch, capsys):
    """A run killed in this process (an exception) and resumed, with a holder SIGKILLed in between: the
    kernel dropped its lock, and a child it forked (as a multiprocessing worker would be) holds none."""
    config = tmp_path / "c.toml"
    config.write_text('[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 6\n[sample]\nbatch = 3\n')
    run = tmp_path / "r"
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Interrupting())
    assert main(["run", str(config), "--out", str(run), "--no-progress"]) == 130
    holder = start_holder("run", run, "fork")  # the killed run's process (this one) let go of it
    try:
        assert writer_of(run) is not None
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        os.kill(holder.child, 0)  # the forked child lives on
        assert writer_of(run) is None
        monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Closing())
        capsys.readouterr()
        assert main(["run", "--resume", str(run), "--no-progress"]) == 0, capsys.readouterr().err
        assert read_jsonl(run / "events.jsonl")[-1]["type"] == "end"
    finally:
        stop(holder)
        try:
            os.kill(holder.child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def finished_comparison(tmp_path: Path) -> tuple[Path, Path]:
    """A comparison config and an --out whose one run has finished (test_compare's setup): a rerun loads
    no engine, it only scores and reports."""
    from coevolve.base.config import as_dict, build_config, dump_toml
    from coevolve.compare import CompareConfig, planned_runs, run_config
    from coevolve.runstore import atomic_write_json, atomic_write_text
    from tasks.registry import get_task

    text = ('[compare]\nmethods = ["eoh"]\ntasks = ["tsp_construct"]\nbudgets = [5]\nseeds = [0]\n'
            '[test]\nsizes = [20]\nlimit = 5\n')
    path = tmp_path / "cmp.toml"
    path.write_text(text)
    import tomllib
    config = build_config(CompareConfig, tomllib.loads(text))
    root = tmp_path / "cmp"
    task = get_task("tsp_construct")
    for spec in planned_runs(config):
        d = spec.directory(root)
        atomic_write_text(d / "config.toml", dump_toml(as_dict(run_config(config, spec, d))))
        atomic_write_text(d / "events.jsonl", '{"type": "start"}\n{"type": "end"}\n')
        atomic_write_json(d / "summary.json", {
            "method": spec.method, "task": spec.task, "seed": spec.seed, "budget": spec.budget, "evaluations": 5,
            "valid": 1, "valid_rate": 0.2, "failures": {}, "best_so_far": [[3, 7.0]], "population": [3], "es": None,
            "train": {"split": "train", "size": 50, "direction": "min", "reference": None},
            "best": {"id": 3, "objective": 7.0, "operator": "i1", "step": 0, "model_state": {"kind": "base"}},
            "ledger": {"budget": 5, "used": 5, "outcomes": {"evaluated": 5}, "llm_requests": 5}})
        atomic_write_text(d / "best.py", task.template)
    return path, root


def test_a_second_compare_on_the_same_out_is_refused(tmp_path):
    config, root = finished_comparison(tmp_path)
    holder = start_holder("compare", root)
    try:
        before = snapshot(tmp_path)
        done = coevolve("compare", str(config), "--out", str(root), "--no-progress")
        assert done.returncode == 2, done.stdout + done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert re.fullmatch(two_writers("coevolve compare: error: ", root, holder.pid, "run the comparison again"),
                            last), done.stderr
        assert "Traceback" not in done.stderr
        assert snapshot(tmp_path) == before, "a refused comparison wrote files"
    finally:
        stop(holder)


def test_a_resume_of_an_arm_run_while_its_comparison_runs_is_refused(tmp_path):
    """The comparison holds its root for its whole run but each arm run only while it works on it: an arm
    it has not reached yet (or has left) is still the comparison's to write, so `run --resume ARM` is
    refused, naming the comparison; once it has stopped, the arm resumes alone."""
    config, root = finished_comparison(tmp_path)
    arm = next((root / "runs").glob("*/*"))
    holder = start_holder("compare", root)
    try:
        before = snapshot(tmp_path)
        done = coevolve("run", "--resume", str(arm), "--no-progress")
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert re.fullmatch(
            re.escape(f"coevolve run: error: {arm} is a run of the comparison in {root.resolve()}, which is being "
                      f"run by pid {holder.pid} on {socket.gethostname()}, ") + SINCE
            + re.escape(f": wait for it, or stop it, then `coevolve run --resume {arm}`"), lines[0]), lines[0]
        assert snapshot(tmp_path) == before, "a refused resume wrote files"
        with pytest.raises(UsageError, match="is a run of the comparison in"):
            RunStore.open(arm, write=True)
    finally:
        stop(holder)
    with RunStore.open(arm, write=True) as store:  # the comparison has stopped: the arm is anyone's to resume
        assert store.writer() is None


def test_one_process_shares_its_hold_and_lets_go_on_close(tmp_path):
    """Stores of one directory in one process share the hold (a run resumed where it was killed); the
    lock goes when the last of them is closed, and a store that is collected lets go too."""
    run = endpoint_run(tmp_path / "r")
    first = RunStore.open_run(run, write=True)
    second = RunStore.open_run(run, write=True)
    record = (run / LOCK).read_text()
    assert f'"pid": {os.getpid()}' in record
    try_hold = ("import sys\nfrom coevolve.runstore import RunStore\n"
                "RunStore.open_run(sys.argv[1], write=True)\nprint('held')")

    def elsewhere() -> str:
        done = subprocess.run([sys.executable, "-c", try_hold, str(run)], cwd=ROOT, env=child_environment(),
                              capture_output=True, text=True, timeout=120)
        return done.stdout.strip() or done.stderr.strip().splitlines()[-1]

    assert "is being written by another process" in elsewhere()
    first.close()
    assert "is being written by another process" in elsewhere()
    second.close()
    assert elsewhere() == "held"
    # a second hold in this process leaves the holder's record as it was (a refused resume writes nothing)
    with RunStore.open_run(run, write=True):
        third = RunStore.open_run(run, write=True)
        del third  # collected: its share goes, the with block's stays
        assert writer_of(run) is None  # held by this process: no other writer
        assert "is being written by another process" in elsewhere()
    assert elsewhere() == "held"


def test_without_flock_the_directory_goes_unguarded(tmp_path, monkeypatch):
    """NFS without lockd, some FUSE mounts: flock fails with ENOLCK / EOPNOTSUPP, and runs go on unlocked."""
    run = endpoint_run(tmp_path / "r")

    def no_flock(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with RunStore.open_run(run, write=True), RunStore.open_run(run, write=True):
        assert writer_of(run) is None
    release = hold_directory(tmp_path, "again")
    release()
