"""Run one piece of untrusted code in a forked child of the warm worker and
supervise it: wall-clock deadline, captured output, process-group kill, and
a typed verdict when the child dies without reporting.
"""

from __future__ import annotations

import ctypes
import faulthandler
import fcntl
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

from coevolve.sandbox import wire
from coevolve.sandbox.guard import apply_limits, install_guards
from coevolve.sandbox.results import FailureKind

_PR_SET_PDEATHSIG = 1
_F_SETPIPE_SZ = 1031
_PR_SET_CHILD_SUBREAPER = 36
_TAIL_BYTES = 2000
_MEMORY_MARKERS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory")

_libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> bool:
    return _libc.prctl(option, value, 0, 0, 0) == 0


def become_subreaper() -> bool:
    """Orphans of a candidate (a process it forked and abandoned) are then
    re-parented to this worker instead of init, so the sweep can kill them."""
    return prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> None:
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _LimitedText:
    """sys.stdout/sys.stderr for the candidate: writes to a file descriptor
    until `limit` bytes, then swallows everything, so a print loop costs no
    system calls once the budget is spent."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, fd: int, limit: int) -> None:
        self._fd = fd
        self._left = limit

    def write(self, text: str) -> int:
        if self._left > 0:
            data = str(text).encode("utf-8", "replace")[: self._left]
            os.write(self._fd, data)
            self._left -= len(data)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


class _OutputCapture:
    """Keeps the head (up to `limit` bytes) and a short tail of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail = (self.tail + chunk)[-_TAIL_BYTES:]

    def text(self) -> str:
        out = self.head.decode("utf-8", "replace")
        dropped = self.total - len(self.head) - len(self.tail)
        if self.tail:
            if dropped > 0:
                out += f"\n...[{dropped} bytes of output dropped]...\n"
            out += self.tail.decode("utf-8", "replace")
        return out


_SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def traceback_tail(exc: BaseException, max_lines: int = 12, max_chars: int = 2000) -> str:
    """The end of the traceback, without the sandbox's own frames: the model
    reading it should see its code and the evaluator, nothing else."""
    report = traceback.TracebackException.from_exception(exc)
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if not frame.filename.startswith(_SANDBOX_DIR)]
    )
    lines = "".join(report.format()).rstrip().splitlines()
    text = "\n".join(lines[-max_lines:])
    return text[-max_chars:]


def _enter_child(workdir: str, out_w: int, close_fds: list[int], memory_mb: int,
                 timeout_s: float, output_limit: int) -> None:
    os.setsid()  # own session and process group: one killpg reaches everything it starts
    die_with_parent()
    for fd in close_fds:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.close(devnull)
    os.close(out_w)
    os.chdir(workdir)
    os.environ["HOME"] = workdir
    os.environ["TMPDIR"] = workdir
    tempfile.tempdir = workdir
    sys.stdin = open(os.devnull)
    sys.stdout = _LimitedText(1, output_limit)
    sys.stderr = _LimitedText(2, output_limit)
    faulthandler.enable(file=sys.stderr)
    apply_limits(memory_mb, timeout_s)
    install_guards(workdir)


def run_in_child(
    body: Callable[[], dict[str, Any]],
    *,
    scratch_root: str,
    timeout_s: float,
    memory_mb: int,
    output_limit: int,
    close_fds: list[int],
) -> dict[str, Any]:
    """Fork, restrict, run `body` in the child and return its dict, or a dict
    with `failure` and `message` describing how the child ended. The result
    always carries `seconds` and `output`."""
    workdir = tempfile.mkdtemp(prefix="cand-", dir=scratch_root)
    result_r, result_w = os.pipe()
    out_r, out_w = os.pipe()
    try:  # a bigger pipe: a flood of output needs fewer hand-offs between processes
        fcntl.fcntl(out_r, _F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 0
        try:
            os.close(result_r)
            os.close(out_r)
            _enter_child(workdir, out_w, close_fds, memory_mb, timeout_s, output_limit)
            outcome = body()
            sys.stdout.flush()
            sys.stderr.flush()
            wire.send(result_w, outcome)
        except BaseException as exc:  # report anything, even a broken body
            try:
                wire.send(result_w, {"failure": FailureKind.CRASH.value,
                                     "message": "sandbox child failed: " + traceback_tail(exc)})
            except BaseException:
                status = 70
        finally:
            os._exit(status)

    os.close(result_w)
    os.close(out_w)
    try:
        return _supervise(pid, start, workdir, result_r, out_r, timeout_s, output_limit)
    finally:
        os.close(result_r)
        os.close(out_r)
        shutil.rmtree(workdir, ignore_errors=True)


def _supervise(pid: int, start: float, workdir: str, result_r: int, out_r: int,
               timeout_s: float, output_limit: int) -> dict[str, Any]:
    deadline = start + timeout_s
    output = _OutputCapture(output_limit)
    result_bytes = bytearray()
    open_fds = {result_r, out_r}
    exit_status: int | None = None
    timed_out = False
    while True:
        now = time.monotonic()
        if now >= deadline and exit_status is None:
            timed_out = True
            break
        # Poll for the child's exit too: normally its exit closes the pipes
        # and wakes select, but a process it forked may hold them open.
        wait = 0.05 if exit_status is not None else min(deadline - now, 0.1)
        if open_fds:
            ready, _, _ = select.select(list(open_fds), [], [], wait)
        else:  # pipes closed, exit imminent: wait for it briefly
            ready = []
            time.sleep(0.001)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.discard(fd)
            elif fd == out_r:
                output.add(chunk)
            else:
                result_bytes += chunk
        if exit_status is None:
            waited, status = os.waitpid(pid, os.WNOHANG)
            if waited:
                exit_status = status
        # Once the child is gone, stop as soon as the pipes go quiet: a
        # process it left behind may hold them open forever.
        if exit_status is not None and (not open_fds or not ready):
            break
    seconds = time.monotonic() - start

    _kill_everything(pid)
    if exit_status is None:
        _, exit_status = os.waitpid(pid, 0)

    verdict: dict[str, Any]
    if result_bytes and not timed_out:
        try:
            verdict = wire.recv_bytes(bytes(result_bytes))
        except Exception:
            verdict = {"failure": FailureKind.CRASH.value, "message": "the child's report was cut short"}
    else:
        verdict = _classify_death(exit_status, timed_out, timeout_s, output.text())
    verdict["seconds"] = seconds
    verdict["output"] = output.text()
    return verdict


def _classify_death(status: int, timed_out: bool, timeout_s: float, output: str) -> dict[str, Any]:
    if timed_out:
        return {"failure": FailureKind.TIMEOUT.value, "message": f"exceeded the {timeout_s:g} s time limit"}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU:
            return {"failure": FailureKind.TIMEOUT.value, "message": "exceeded the CPU time limit"}
        if sig == signal.SIGKILL or any(marker in output for marker in _MEMORY_MARKERS):
            return {"failure": FailureKind.MEMORY.value,
                    "message": f"killed by {name} (out of memory)"}
        if sig == signal.SIGXFSZ:
            return {"failure": FailureKind.CRASH.value, "message": "exceeded the file size limit"}
        return {"failure": FailureKind.CRASH.value,
                "message": f"killed by {name}" + (f"\n{output[-_TAIL_BYTES:]}" if output else "")}
    code = os.WEXITSTATUS(status)
    if any(marker in output for marker in _MEMORY_MARKERS):
        return {"failure": FailureKind.MEMORY.value, "message": f"exited with status {code} out of memory"}
    return {"failure": FailureKind.CRASH.value, "message": f"exited with status {code} without a result"}


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(entry))
    return found


def _kill_everything(pid: int) -> None:
    """Kill the candidate's process group, then any orphan it left that was
    re-parented to this (subreaper) worker, and reap them all."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    me = os.getpid()
    for _ in range(50):
        leftovers = [child for child in _children_of(me) if child != pid]
        if not leftovers:
            return
        for child in leftovers:
            try:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
