"""The Sandbox: a pool of warm worker processes that score untrusted code.

Each worker is a separate interpreter (started with subprocess, never forked
from the caller, which may hold an inference engine and its threads). A job
is sent to an idle worker; the worker forks a restricted child for it and
replies with a plain dict. A worker that dies or stops answering is replaced
and its job reported as a `crash`.
"""

from __future__ import annotations

import inspect
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from coevolve.base.untrusted import clean
from coevolve.sandbox import wire
from coevolve.sandbox.child import remove_tree
from coevolve.sandbox.results import EvalResult, FailureKind, TaskError, ToolResult, over_seeds
from tasks.loader import guarded
from tasks.registry import get_task

Job = tuple[str, Any, "str | None", "int | None"]  # (code, task name or object, split, size)
MAX_SEEDS = 64  # scorings of one program under seeds of its generators ([sandbox] seeds): k times the time

# Time a worker may take beyond the candidate's own limit before it is
# presumed stuck: instance generation on first use, fork, clean-up. The
# trusted scoring after the candidate (an ACO colony) gets the candidate's
# limit again: before the evaluator was split, it ran inside that limit.
_WORKER_GRACE_S = 120.0
MIN_MEMORY_MB = 16  # the least memory a program is run in


# What a worker (and so every candidate, whose /proc/self/environ is the
# worker's) inherits of the owner's environment: what starting Python needs,
# the locale, and the sandbox's own settings. Never keys, tokens or paths
# to the owner's files; a task names any other variable it needs.
_ENVIRONMENT_ALLOWED = ("PATH", "PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
_ENVIRONMENT_PREFIX = "COEVOLVE_SANDBOX_"


def worker_environment() -> dict[str, str]:
    env = {name: os.environ[name] for name in _ENVIRONMENT_ALLOWED if name in os.environ}
    env.update({name: value for name, value in os.environ.items() if name.startswith(_ENVIRONMENT_PREFIX)})
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    env["PYTHONHASHSEED"] = "0"  # set and dict-of-str orders the same in every run: candidates reproduce
    return env


def asked_environment(task: Any) -> dict[str, str]:
    """The variables a task names in `sandbox_environment` (a tuple of
    names), with the owner's values: the only way one reaches a candidate."""
    names = getattr(task, "sandbox_environment", ()) or ()
    return {name: os.environ[name] for name in names if name in os.environ}


class _WorkerProcess:
    def __init__(self) -> None:
        env = worker_environment()
        self.process = subprocess.Popen(
            # -P: no working directory first on the worker's sys.path, where a project's own tasks.py
            # (invoke's) or tasks/ would shadow coevolve's tasks package and the worker die importing it;
            # what the caller imports from there still reaches the worker, in its sys.path (hello)
            [sys.executable, "-P", "-m", "coevolve.sandbox.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal stops the caller, not the pool
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.write_fd = self.process.stdin.fileno()
        self.read_fd = self.process.stdout.fileno()
        self.scratch_root = ""
        try:
            hello = self.request({"op": "hello", "sys_path": list(sys.path)}, timeout_s=60.0)
        except (wire.PeerGone, wire.WireTimeout, OSError) as exc:
            self.stop(graceful=False)
            raise RuntimeError(f"a sandbox worker failed to start ({type(exc).__name__}); "
                               "its error, if any, is on stderr above") from None
        self.network_isolated = bool(hello.get("network_isolated"))
        self.confined = bool(hello.get("confined"))
        self.unconfined_reason = str(hello.get("unconfined_reason", ""))
        self.scratch_root = str(hello.get("scratch_root", ""))
        self.hidden_view = bool(hello.get("hidden_view"))
        self.memory_limit = str(hello.get("memory_limit", "rlimit"))
        if not self.confined:
            _warn_unconfined(self.unconfined_reason)
        elif not self.hidden_view:
            _warn_once(f"sandbox: candidates see the whole file system read-only, not only the Python installation "
                       f"({hello.get('hidden_view_reason')}); they run as an unprivileged uid where this machine "
                       "has one. See docs/sandbox.md.")
        if self.memory_limit == "rlimit":
            _warn_once(f"sandbox: memory is limited by RLIMIT_AS only ({hello.get('memory_limit_reason')}): "
                       "memory outside the address space (memfd, tmpfs) is not counted. See docs/sandbox.md.")

    @property
    def pid(self) -> int:
        return self.process.pid

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        wire.send(self.write_fd, message)
        return wire.recv(self.read_fd, deadline=time.monotonic() + timeout_s)

    def stop(self, graceful: bool = True) -> None:
        """Close the worker: EOF on its stdin lets it clean up and exit; one
        that does not within a few seconds, or a stuck one, is killed."""
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5.0 if graceful else 0.0)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self.scratch_root:
            remove_tree(self.scratch_root)


def _boundary_of(workers: list[_WorkerProcess]) -> dict[str, Any]:
    return {"confined": all(w.confined for w in workers), "hidden_view": all(w.hidden_view for w in workers),
            "memory_limit": sorted({w.memory_limit for w in workers}),
            "network_isolated": all(w.network_isolated for w in workers)}


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=5)


def _warn_unconfined(reason: str) -> None:
    _warn_once(f"sandbox: kernel confinement is unavailable ({reason}); candidates run with rlimits, "
               "a process group and Python-level guards only, which code that sets out to can undo. "
               "Scores are still computed outside the candidate's process. See docs/sandbox.md.")


def _portable_task(task: Any) -> Any:
    """How a task travels to a worker (as JSON, never pickled): a registry
    name as is; an object as ["class", module, qualname, args] where args is
    what its class's own __reduce__ gives (JSON values), or nothing for a
    class with a no-argument constructor. The worker builds it once and
    keeps it warm."""
    if isinstance(task, str):
        return task
    # a user's task (tasks/loader.py) travels as its spec; only its own attribute counts, never
    # one a wrapper (compare's LimitedTask) forwards from the task it wraps
    spec = getattr(task, "__dict__", {}).get("__coevolve_spec__")
    if isinstance(spec, str):
        return spec
    missing = [name for name in ("decide", "score", "instance_seconds") if not callable(getattr(task, name, None))]
    if missing:
        raise ValueError(f"task {getattr(task, 'name', task)!r} lacks {', '.join(missing)}: the sandbox runs "
                         "decide() in the candidate's process and score() outside it (see tasks/base.py)")
    cls = type(task)
    importable = cls.__module__ != "__main__" and "<locals>" not in cls.__qualname__
    args: list[Any] = []
    if "__reduce__" in vars(cls):
        reduced = task.__reduce__()
        if isinstance(reduced, tuple) and len(reduced) == 2 and reduced[0] is cls:
            args = list(reduced[1])
    else:
        try:
            inspect.signature(cls).bind()
        except (TypeError, ValueError):
            importable = False
    try:
        json.dumps(args)
    except (TypeError, ValueError):
        importable = False
    if not importable:
        raise ValueError(f"task object {task!r} cannot be sent to a sandbox worker: give its registry name, "
                         "or make its class importable with a no-argument constructor (or a __reduce__ "
                         "returning (class, JSON-able arguments))")
    return ["class", cls.__module__, cls.__qualname__, args]


class Sandbox:
    """Scores candidate programs on tasks, in parallel, under limits.

    >>> with Sandbox(timeout_s=30) as sb:
    ...     result = sb.evaluate(code, "tsp_construct")          # task.train set
    ...     results = sb.evaluate_many([(code, "tsp_construct", "test", 50)])

    `seeds` = k scores each program k times, its `random` and numpy global
    generators seeded 0..k-1 (a randomised heuristic judged by its mean, not by
    one lucky draw; results.over_seeds); 1, the default, scores it once under 0.
    """

    def __init__(self, workers: int | None = None, timeout_s: float = 60.0,
                 memory_mb: int = 2048, output_limit: int = 10_000, seeds: int = 1) -> None:
        if workers is None:
            workers = len(os.sched_getaffinity(0))
        if workers < 1:
            raise ValueError(f"sandbox workers must be >= 1, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"sandbox timeout_s must be > 0, got {timeout_s}")
        if memory_mb < MIN_MEMORY_MB:
            raise ValueError(f"sandbox memory_mb must be >= {MIN_MEMORY_MB}, got {memory_mb}")
        if not 1 <= seeds <= MAX_SEEDS:
            raise ValueError(f"sandbox seeds must be in 1..{MAX_SEEDS}, got {seeds}")
        self.seeds = seeds
        self.workers = workers
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.output_limit = output_limit
        self._idle: queue.Queue[_WorkerProcess | None] = queue.Queue()
        for _ in range(workers):
            self._idle.put(None)  # a slot; its worker starts on first use
        self._all: list[_WorkerProcess] = []
        self._lock = threading.Lock()
        self._closed = False
        self._tasks: dict[str, Any] = {}
        self._boundary: dict[str, Any] | None = None  # None until a worker has said what is in force

    @classmethod
    def from_section(cls, section: Any) -> "Sandbox":
        """A Sandbox with the limits of a config's sandbox section (anything
        with timeout_s, workers (0: default) and memory_mb; seeds where it has them)."""
        return cls(workers=section.workers or None, timeout_s=section.timeout_s, memory_mb=section.memory_mb,
                   seeds=getattr(section, "seeds", 1))

    # -- public API --------------------------------------------------------
    def evaluate(self, code: str, task: Any, split: str | None = None,
                 size: int | None = None) -> EvalResult:
        """Score `code` on a task (registry name or task object); split and
        size default to the task's training set."""
        # one after another, not through evaluate_many: an error here (a task's own) leaves the sandbox open
        jobs = self._seeded(self._evaluation_job(code, task, split, size))
        return over_seeds([EvalResult.from_dict(self._submit(job, self.timeout_s)) for job in jobs])

    def evaluate_many(self, jobs: Sequence[Job]) -> list[EvalResult]:
        """Score many (code, task, split, size) jobs over the pool; results in
        the order of `jobs` (each over the sandbox's seeds)."""
        prepared = [seeded for job in jobs for seeded in self._seeded(self._evaluation_job(*job))]
        if not prepared:
            return []
        threads = ThreadPoolExecutor(max_workers=min(self.workers, len(prepared)))
        try:
            replies = list(threads.map(lambda job: self._submit(job, self.timeout_s), prepared))
        except BaseException:
            # Ctrl-C (or any error) while candidates run: stop the workers first,
            # which ends their candidates and unblocks the threads waiting on them
            self.close()
            raise
        finally:
            threads.shutdown(wait=True, cancel_futures=True)
        results = [EvalResult.from_dict(reply) for reply in replies]
        return [over_seeds(results[i:i + self.seeds]) for i in range(0, len(results), self.seeds)]

    def run_python(self, code: str, timeout_s: float = 10.0) -> ToolResult:
        """Run a script for an agent's python tool. A trailing expression's
        value is printed, as in a notebook."""
        job = {"op": "python", "code": code, "timeout_s": timeout_s,
               "memory_mb": self.memory_mb, "output_limit": self.output_limit}
        reply = self._submit(job, timeout_s)
        failure = reply.get("failure")
        return ToolResult(stdout=clean(reply.get("output", "")), error=clean(reply.get("message", "")),
                          failure=FailureKind(failure) if failure else None,
                          seconds=float(reply.get("seconds", 0.0)))

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [worker.pid for worker in self._all]

    @property
    def confined(self) -> bool:
        """True when candidates run in their own PID, mount and IPC namespaces
        with capabilities dropped and a seccomp filter (needs root); see
        coevolve/sandbox/confine.py."""
        with self._lock:
            return bool(self._all) and all(worker.confined for worker in self._all)

    @property
    def boundary(self) -> dict[str, Any]:
        """What is in force, for a run's record: kernel confinement, the
        hidden file-system view, and what limits memory ("cgroup v1",
        "cgroup v2", or "rlimit": address space only)."""
        with self._lock:
            workers, boundary = list(self._all), self._boundary
        if workers:
            return _boundary_of(workers)
        if boundary is None:
            # No candidate ran in this process (a resumed run whose remaining
            # steps evaluated nothing): rather than record an unconfined run,
            # start one worker to learn what candidates run under here.
            try:
                probe = _WorkerProcess()
            except Exception as exc:  # the record must not cost the run its summary
                _warn_once(f"sandbox: could not start a worker to record what is in force ({exc})")
                return {"confined": False, "hidden_view": False, "memory_limit": [], "network_isolated": False}
            try:
                boundary = _boundary_of([probe])
            finally:
                probe.stop()
            with self._lock:
                self._boundary = self._boundary or boundary
                boundary = self._boundary
        # closed, or between workers: what the last workers had (_remember_boundary)
        return dict(boundary)

    def _remember_boundary(self) -> None:
        """Keep what the workers have in force for after close (a run's summary
        asks once the pool is gone). Not a cached property: a worker replaced
        after a crash may start under other conditions, so it is re-measured
        each time a worker starts."""
        with self._lock:
            self._boundary = _boundary_of(self._all)

    @property
    def network_isolated(self) -> bool:
        """True when the workers run in an empty network namespace (root);
        otherwise only the in-process socket guard blocks the network."""
        with self._lock:
            return bool(self._all) and all(worker.network_isolated for worker in self._all)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._all = self._all, []
        for worker in workers:
            worker.stop()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_all", None):
            self.close()

    # -- internals -----------------------------------------------------------
    def _resolve_task(self, task: Any) -> Any:
        if not isinstance(task, str):
            return task
        if task not in self._tasks:
            try:
                self._tasks[task] = get_task(task)
            except KeyError as exc:
                raise ValueError(exc.args[0]) from None
        return self._tasks[task]

    def _evaluation_job(self, code: str, task: Any, split: str | None,
                        size: int | None) -> dict[str, Any]:
        task_object = self._resolve_task(task)
        default_split, default_size = task_object.train
        split = default_split if split is None else split
        with guarded():  # the task's own code, run here: one that exits is one line (coevolve.cli), not a silent end
            splits = task_object.splits()
        if split not in splits:
            raise ValueError(f"task {task_object.name!r} has no split {split!r} "
                             f"(splits: {', '.join(splits)})")
        if size is None:
            if split == default_split:
                size = default_size
            elif len(splits[split]) == 1:
                size = splits[split][0]
            else:
                raise ValueError(f"split {split!r} of task {task_object.name!r} has several sizes "
                                 f"{splits[split]}: pass size")
        if size not in splits[split]:
            raise ValueError(f"task {task_object.name!r} split {split!r} has no size {size} "
                             f"(sizes: {splits[split]})")
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        return {"op": "evaluate", "code": code, "task": _portable_task(task), "split": split, "size": size,
                "timeout_s": self.timeout_s, "memory_mb": self.memory_mb,
                "output_limit": self.output_limit, "environment": asked_environment(task_object)}

    def _seeded(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The job once per seed of the candidate's generators (the worker's default, 0, alone)."""
        return [{**job, "seed": seed} for seed in range(self.seeds)]

    def _checkout(self) -> _WorkerProcess:
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        worker = self._idle.get()
        if worker is None or worker.process.poll() is not None:
            if worker is not None:
                self._forget(worker)
            try:
                worker = _WorkerProcess()
            except BaseException:
                self._idle.put(None)
                raise
            with self._lock:
                closed = self._closed
                if not closed:
                    self._all.append(worker)
            if closed:  # closed while it started (Ctrl-C then): close() never saw it, so stop it here
                worker.stop(graceful=False)
                self._idle.put(None)
                raise RuntimeError("the sandbox is closed")
            self._remember_boundary()
        return worker

    def _forget(self, worker: _WorkerProcess, graceful: bool = True) -> None:
        worker.stop(graceful)
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)

    def _submit(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        worker = self._checkout()
        try:
            # the worker stops the task's own code (a score() that loops) before this, as the task's failure
            answer_within = 2 * timeout_s + _WORKER_GRACE_S
            reply = worker.request({**job, "answer_within_s": answer_within}, answer_within)
        except (wire.PeerGone, wire.WireTimeout, wire.BadMessage, OSError) as exc:
            self._forget(worker, graceful=False)
            self._idle.put(None)
            what = "stopped answering" if isinstance(exc, wire.WireTimeout) else "died"
            return {"failure": FailureKind.CRASH.value, "objective": None,
                    "message": f"sandbox worker {what} while running the candidate"}
        except BaseException:
            self._forget(worker, graceful=False)
            self._idle.put(None)
            raise
        self._idle.put(worker)
        if not isinstance(reply, dict):
            return {"failure": FailureKind.CRASH.value, "objective": None,
                    "message": f"the sandbox worker replied with a {type(reply).__name__}"}
        if reply.get("task_error"):  # the task failed, not the candidate: stop, naming the task's line
            raise TaskError(clean(str(reply["task_error"])))
        return reply
