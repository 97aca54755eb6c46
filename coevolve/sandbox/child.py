"""Run one piece of untrusted code in a forked child of the warm worker and
supervise it: the whole-job wall-clock limit, a CPU-time limit per stage
(loading, then each instance), captured output, the kill, and a typed
verdict from evidence (exit status, CPU time, memory high-water mark) when
the child ends without a usable report.

The child's report is untrusted bytes: it is decoded with the pickle-free
wire format under a size limit, and the caller checks its contents.
"""

from __future__ import annotations

import faulthandler
import fcntl
import math
import os
import logging
import select
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from coevolve.sandbox import confine, wire
from coevolve.sandbox.cgroup import MemoryCgroups
from coevolve.sandbox.guard import apply_limits, install_guards
from coevolve.sandbox.results import FailureKind

_F_SETPIPE_SZ = 1031
_TAIL_BYTES = 2000
_MEMORY_MARKERS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory")
_TICKS = os.sysconf("SC_CLK_TCK")
log = logging.getLogger(__name__)


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


@dataclass
class Limits:
    """What one job may use. `stage_cpu_s`: CPU seconds for loading the code
    and for each instance after it (None: no per-stage limit); `stages`
    names them in messages, e.g. ("test50", 1000). `decision_bytes`: the
    most one decision's arrays may weigh (the task's decision shape), which
    bounds every frame the candidate may send. `environment`: the variables
    the candidate sees (built from an allowlist, nothing of the owner's)."""

    timeout_s: float
    memory_mb: int
    output_limit: int
    stage_cpu_s: float | None = None
    stages: tuple[str, int] = ("", 0)
    decision_bytes: int = 0
    environment: dict[str, str] = field(default_factory=dict)

    @property
    def stage_wall_s(self) -> float:
        # a candidate that blocks (sleeps, waits) uses no CPU: bound its wall time too
        assert self.stage_cpu_s is not None
        return max(4 * self.stage_cpu_s, self.stage_cpu_s + 20.0)

    @property
    def cpu_limit_s(self) -> int:
        return max(1, math.ceil(self.timeout_s))


# The JSON part of any frame a candidate sends: a decision's placeholder or
# a verdict with a message of at most MESSAGE_LIMIT characters. Decoding it
# costs at most a few MB whatever it holds; the arrays go in the blob.
DOCUMENT_LIMIT = 64 << 10
MESSAGE_LIMIT = 4000


@dataclass
class Confinement:
    """How the worker confines children: the kernel view (None: unconfined)
    and the memory cgroups (None: the rlimit alone)."""

    view: confine.View | None = None
    cgroups: MemoryCgroups | None = None


Body = Callable[[Callable[[dict[str, Any]], None]], dict[str, Any]]


def _close_other_fds(keep: set[int]) -> None:
    """Only the pipes to the worker and stdio stay open in the child."""
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _enter_child(workdir: str, out_w: int, keep: set[int], limits: Limits, confinement: Confinement,
                 cgroup: str | None) -> None:
    os.setsid()  # own session and process group: without namespaces, one killpg reaches everything
    confine.die_with_parent()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.close(devnull)
    os.close(out_w)
    _close_other_fds(keep)
    if cgroup is not None:
        MemoryCgroups.join(cgroup)  # first: the view below has no /sys
    if confinement.view is not None:
        confine.enter(workdir, confinement.view)
    os.chdir(workdir)
    # the environment is built, not inherited: nothing of the owner's
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})
    os.environ.update(limits.environment)
    os.environ["HOME"] = workdir
    os.environ["TMPDIR"] = workdir
    tempfile.tempdir = workdir
    sys.dont_write_bytecode = True
    sys.stdin = open(os.devnull)
    sys.stdout = _LimitedText(1, limits.output_limit)
    sys.stderr = _LimitedText(2, limits.output_limit)
    faulthandler.enable(file=sys.stderr)
    apply_limits(limits.memory_mb, limits.cpu_limit_s)
    install_guards(workdir)


def run_in_child(body: Body, *, scratch_root: str, limits: Limits, fork: Callable[[], int],
                 confinement: Confinement) -> dict[str, Any]:
    """Fork (with `fork`: plain, or into a new PID namespace), restrict, run
    `body(emit)` in the child and return its decoded report, or a verdict
    with `failure` and `message` describing how the child ended. The body
    calls `emit({"loaded": True})` once its code is loaded and
    `emit({"decision": d})` for each instance: each is one frame the worker
    reads as it comes, and the decisions it received are the candidate's
    decisions, final (they are also its progress: the per-instance budget
    restarts at each). The result always carries `seconds`, `output` and
    `cpu_seconds`; nothing the child started survives the return."""
    workdir = tempfile.mkdtemp(prefix="cand-", dir=scratch_root)
    view = confinement.view
    if view is not None and not view.hidden:
        try:  # the read-only host view shows this directory itself: the candidate's uid must own it
            os.chown(workdir, view.uid, view.uid)
        except OSError:
            pass
    cgroup = None
    if confinement.cgroups is not None:
        try:
            cgroup = confinement.cgroups.create(limits.memory_mb * (1 << 20) + _resident_bytes())
        except OSError as exc:
            log.warning("sandbox: no memory cgroup for this candidate (%s); the rlimit alone holds", exc)
    result_r, result_w = os.pipe()
    out_r, out_w = os.pipe()
    try:  # a bigger pipe: a flood of output needs fewer hand-offs between processes
        fcntl.fcntl(out_r, _F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass
    start = time.monotonic()
    try:
        pid = fork()
    except BaseException:
        for fd in (result_r, result_w, out_r, out_w):
            os.close(fd)
        if cgroup is not None and confinement.cgroups is not None:
            confinement.cgroups.remove(cgroup)
        remove_tree(workdir)
        raise
    if pid == 0:  # the child: never returns
        status = 0
        try:
            for fd in (result_r, out_r):
                os.close(fd)
            _enter_child(workdir, out_w, {result_w}, limits, confinement, cgroup)
            outcome = body(lambda frame: wire.send(result_w, frame))
            sys.stdout.flush()
            sys.stderr.flush()
            if isinstance(outcome.get("message"), str):
                outcome["message"] = outcome["message"][:MESSAGE_LIMIT]
            wire.send(result_w, outcome)
        except BaseException as exc:  # report anything, even a broken body
            try:
                wire.send(result_w, {"failure": FailureKind.CRASH.value,
                                     "message": "sandbox child failed: " + traceback_tail(exc)})
            except BaseException:
                status = 70
        finally:
            os._exit(status)

    for fd in (result_w, out_w):
        os.close(fd)
    try:
        return _Supervisor(pid, start, limits, result_r, out_r, confinement, cgroup).run()
    finally:
        for fd in (result_r, out_r):
            os.close(fd)
        if cgroup is not None and confinement.cgroups is not None:
            confinement.cgroups.remove(cgroup)
        remove_tree(workdir)


def _resident_bytes() -> int:
    """This worker's resident memory: pages the child copies on write are
    charged to its cgroup, so its limit is the budget on top of them."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def remove_tree(path: str, budget_s: float = 10.0) -> None:
    """Remove a candidate's temp dir without recursion (an explicit stack of
    open directory descriptors, never following links) and within
    `budget_s`; anything that fails is logged, never raised. With the
    hidden view the directory is empty (the temp space was a tmpfs of the
    candidate's mount namespace, gone with it), so this is one rmdir.

    Not shutil.rmtree: on the Pythons we support (3.10, 3.11) its fd-based
    walk recurses once per directory level, so a candidate that nests 1,500
    directories (a cheap loop of mkdir) makes it raise RecursionError in the
    worker (measured on 3.11.7; tests/test_sandbox_boundary.py and
    test_sandbox_classes.py keep such a tree); and it has no time bound, so a
    candidate that leaves a million files would hold its worker that long."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    deadline = time.monotonic() + budget_s
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    stack: list[tuple[int, str]] = []  # (open directory, its name in the one below)
    try:
        stack.append((os.open(path, flags), ""))
        while stack:
            if time.monotonic() > deadline:
                raise TimeoutError(f"still removing after {budget_s:g} s")
            fd, name = stack[-1]
            deeper = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if not entry.is_dir(follow_symlinks=False):
                        os.unlink(entry.name, dir_fd=fd)
                    else:
                        deeper = entry.name
                        break
            if deeper is not None:
                stack.append((os.open(deeper, flags, dir_fd=fd), deeper))
                continue
            stack.pop()
            os.close(fd)
            if stack:
                os.rmdir(name, dir_fd=stack[-1][0])
        os.rmdir(path)
    except (OSError, TimeoutError) as exc:
        log.warning("sandbox: could not remove the temp dir %s: %s", path, exc)
    finally:
        for fd, _ in stack:
            try:
                os.close(fd)
            except OSError:
                pass


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc (0 when gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _blame(why: str) -> dict[str, Any]:
    """The verdict for a report that breaks the protocol: the candidate's
    fault (only its process writes that pipe), never the worker's."""
    return {"failure": FailureKind.CRASH.value, "message": f"the candidate's report is unusable: {why}"}


class _OwnerGone(Exception):
    """The Sandbox that owns this worker closed its pipe or died."""


class _Supervisor:
    def __init__(self, pid: int, start: float, limits: Limits, result_r: int, out_r: int,
                 confinement: Confinement, cgroup: str | None) -> None:
        self.pid, self.start, self.limits = pid, start, limits
        self.confined = confinement.view is not None
        self.cgroups, self.cgroup = confinement.cgroups, cgroup
        self.result_r, self.out_r = result_r, out_r
        self.output = _OutputCapture(limits.output_limit)
        self.frames = bytearray()  # at most one frame (bounded by the limits) plus one read
        self.loaded = False
        self.decisions: list[Any] = []
        self.final: Any = None  # the child's last frame: its verdict
        self.stage = 0  # 0: loading; k: instance k
        self.stage_began = start
        self.stage_cpu = 0.0
        self.exit: tuple[int, Any] | None = None  # (status, rusage)
        self.verdict: dict[str, Any] | None = None  # set when the supervisor stops the child

    def run(self) -> dict[str, Any]:
        open_fds = {self.result_r, self.out_r}
        deadline = self.start + self.limits.timeout_s
        next_check = self.start
        try:
            while True:
                now = time.monotonic()
                if self.exit is None and now >= deadline:
                    self.verdict = {"failure": FailureKind.TIMEOUT.value,
                                    "message": f"exceeded the {self.limits.timeout_s:g} s time limit"}
                    break
                if self.exit is None and self.limits.stage_cpu_s is not None and now >= next_check:
                    next_check = now + 0.1
                    if self._stage_over(now):
                        break
                wait = 0.05 if self.exit is not None else max(0.0, min(deadline - now, 0.1))
                watched = list(open_fds) + ([_OWNER_FD] if _OWNER_FD is not None else [])
                ready, _, _ = select.select(watched, [], [], wait)
                if _OWNER_FD is not None and _OWNER_FD in ready or _owner_changed():
                    raise _OwnerGone()
                for fd in ready:
                    if fd == _OWNER_FD:
                        continue
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        open_fds.discard(fd)
                    elif fd == self.out_r:
                        self.output.add(chunk)
                    else:
                        self.frames += chunk
                        self._take_frames()
                if self.verdict is not None:
                    break
                if self.exit is None:
                    waited, status, usage = os.wait4(self.pid, os.WNOHANG)
                    if waited:
                        self.exit = (status, usage)
                # Once the child is gone, stop as soon as the pipes go quiet: a
                # process it left behind (without namespaces) may hold them open.
                if self.exit is not None and (not open_fds or not ready):
                    break
        except _OwnerGone:
            self._kill()
            raise
        seconds = time.monotonic() - self.start
        self._kill()
        status, usage = self.exit if self.exit is not None else (0, None)
        if self.verdict is not None:
            verdict = self.verdict
        elif self.frames:
            verdict = _blame(f"it sent {len(self.frames)} bytes that are not a complete frame")
        elif self.final is not None:
            verdict = self.final
            if isinstance(verdict, dict) and verdict.get("failure") is None:
                verdict["decisions"] = self.decisions
        else:
            verdict = self._classify_death(status, usage)
        if not isinstance(verdict, dict):
            verdict = _blame(f"it reported a {type(verdict).__name__}, not a verdict")
        verdict["seconds"] = seconds
        verdict["output"] = self.output.text()
        verdict["cpu_seconds"] = (usage.ru_utime + usage.ru_stime) if usage is not None else 0.0
        return verdict

    # -- the candidate's frames ------------------------------------------------
    def _take_frames(self) -> None:
        """Decode every complete frame received so far. A frame's size is
        checked from its header before it is buffered further; each decision
        is final once received, and moves the candidate to its next stage."""
        while self.verdict is None and len(self.frames) >= wire.HEADER_SIZE:
            document_length, blob_length = wire.frame_lengths(self.frames)
            if document_length > DOCUMENT_LIMIT or blob_length > self.limits.decision_bytes:
                self.verdict = _blame(f"it announced a frame of {document_length} + {blob_length} bytes, over "
                                      f"the {DOCUMENT_LIMIT} + {self.limits.decision_bytes}-byte limit "
                                      "(the task's largest decision)")
                return
            size = wire.HEADER_SIZE + document_length + blob_length
            if len(self.frames) < size:
                return
            frame = bytes(self.frames[:size])
            del self.frames[:size]
            try:
                message = wire.decode(frame, limit=size)
            except wire.BadMessage as exc:
                self.verdict = _blame(f"a malformed frame: {exc}")
                return
            self._take(message)

    def _take(self, message: Any) -> None:
        if self.final is not None:
            self.verdict = _blame("it sent frames after its verdict")
        elif isinstance(message, dict) and set(message) == {"loaded"} and not self.loaded:
            self.loaded = True
            self._next_stage()
        elif isinstance(message, dict) and set(message) == {"decision"} and self.loaded:
            if len(self.decisions) >= max(self.limits.stages[1], 1):
                self.verdict = _blame(f"it sent more than {self.limits.stages[1]} decisions (one per instance)")
                return
            self.decisions.append(message["decision"])
            self._next_stage()
        elif isinstance(message, dict) and "failure" in message and "decisions" not in message:
            self.final = message
        else:
            self.verdict = _blame(f"an unexpected frame {str(message)[:80]!r}")

    # -- per-stage limits ----------------------------------------------------
    def _next_stage(self) -> None:
        self.stage += 1
        self.stage_began = time.monotonic()
        self.stage_cpu = _cpu_seconds(self.pid)

    def _stage_name(self) -> str:
        label, count = self.limits.stages
        if self.stage == 0:
            return "loading the candidate"
        if count and self.stage > count:
            return "reporting"
        return f"instance {self.stage} of {count} ({label})" if count else f"step {self.stage}"

    def _stage_over(self, now: float) -> bool:
        limit = self.limits.stage_cpu_s
        assert limit is not None
        used = _cpu_seconds(self.pid) - self.stage_cpu
        if used > limit:
            why = f"exceeded the per-instance time limit: more than {limit:.3g} s of CPU time"
        elif now - self.stage_began > self.limits.stage_wall_s:
            why = (f"exceeded the per-instance time limit: more than {self.limits.stage_wall_s:.3g} s "
                   f"of wall time (CPU limit {limit:.3g} s)")
        else:
            return False
        self.verdict = {"failure": FailureKind.TIMEOUT.value, "message": f"{self._stage_name()} {why}",
                        "stage": self.stage}
        return True

    # -- ending --------------------------------------------------------------
    def _kill(self) -> None:
        """SIGKILL to the namespace's init ends every process in it; without
        namespaces, kill the process group and then the orphans re-parented
        to this (subreaper) worker. Reap the child either way."""
        if self.exit is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                if not self.confined:
                    os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _, status, usage = os.wait4(self.pid, 0)
            self.exit = (status, usage)
        elif not self.confined:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not self.confined:
            _sweep_orphans()

    def _classify_death(self, status: int, usage: Any) -> dict[str, Any]:
        cpu = (usage.ru_utime + usage.ru_stime) if usage is not None else 0.0
        high_water_mb = usage.ru_maxrss / 1024 if usage is not None else 0.0
        evidence = f"(CPU {cpu:.2f} s of {self.limits.cpu_limit_s} s, memory high-water {high_water_mb:.0f} MB)"
        output = self.output.text()
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            if sig in (signal.SIGKILL, signal.SIGXCPU) and cpu >= self.limits.cpu_limit_s - 0.05:
                return {"failure": FailureKind.TIMEOUT.value,
                        "message": f"killed by {name} at the CPU time limit {evidence}"}
            if sig == signal.SIGKILL and self.cgroups is not None and self.cgroup is not None \
                    and self.cgroups.oom_kills(self.cgroup):
                return {"failure": FailureKind.MEMORY.value,
                        "message": f"killed by {name}: over the {self.limits.memory_mb} MB memory limit "
                                   f"({self.cgroups.kind}, which counts all its memory) {evidence}"}
            if sig == signal.SIGKILL and (high_water_mb >= 0.5 * self.limits.memory_mb
                                          or any(marker in output for marker in _MEMORY_MARKERS)):
                return {"failure": FailureKind.MEMORY.value, "message": f"killed by {name}, out of memory {evidence}"}
            if sig == signal.SIGXFSZ:
                return {"failure": FailureKind.CRASH.value, "message": "exceeded the file size limit"}
            return {"failure": FailureKind.CRASH.value,
                    "message": f"killed by {name} {evidence}" + (f"\n{output[-_TAIL_BYTES:]}" if output else "")}
        code = os.WEXITSTATUS(status)
        if any(marker in output for marker in _MEMORY_MARKERS):
            return {"failure": FailureKind.MEMORY.value, "message": f"exited with status {code}, out of memory {evidence}"}
        return {"failure": FailureKind.CRASH.value, "message": f"exited with status {code} without a result {evidence}"}


# The worker's end of its owner's pipe, watched while a candidate runs: when
# it turns readable (EOF: the owner closed the sandbox or died) the candidate
# is killed at once and the worker exits. Set by the worker.
_OWNER_FD: int | None = None
_OWNER_PID: int | None = None


def watch_owner(fd: int) -> None:
    global _OWNER_FD, _OWNER_PID
    _OWNER_FD, _OWNER_PID = fd, os.getppid()


def _owner_changed() -> bool:
    # re-parented: the owner died even if some other process still holds the pipe
    return _OWNER_PID is not None and os.getppid() != _OWNER_PID


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


def _sweep_orphans() -> None:
    """Without namespaces: kill and reap any orphan re-parented to this
    (subreaper) worker. Best effort; a namespace makes it unnecessary."""
    me = os.getpid()
    for _ in range(50):
        leftovers = _children_of(me)
        if not leftovers:
            return
        for child in leftovers:
            try:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        time.sleep(0.01)

