"""A warm sandbox worker: `python -m coevolve.sandbox.worker`.

It imports numpy and the task modules once, caches instance sets, and for
each job forks a fresh, confined child (coevolve.sandbox.child and
.confine) so that nothing a candidate does survives into the next one. The
child only runs the heuristic and reports its decisions (tours, picks,
matrices); this worker checks them and computes the objective on its own
copy of the instances, so no candidate ever shares a process with the code
that scores it. Talks to the Sandbox over its stdin/stdout with
coevolve.sandbox.wire messages.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import linecache
import math
import os
import select
import signal
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator

# One BLAS thread: the pool already runs one worker per core, and a
# single-threaded worker is safe to fork.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy  # noqa: E402  (warm import, inherited by every child)

from coevolve.codeparse import template_parameters
from coevolve.sandbox import cgroup, child, confine, wire  # noqa: E402
from coevolve.sandbox.child import Limits, run_in_child, traceback_tail  # noqa: E402
from coevolve.sandbox.results import FailureKind  # noqa: E402
from tasks.base import instance_count  # noqa: E402
from tasks.base import PROGRAM_SEED, InvalidSolution, behaviour_of, feedback_of, seed_program_generators
from tasks.check import BadReturn, StillRunning, declared_instance_mean, instance_values, non_finite, real_number
from tasks.loader import raised_in, user_frame
from tasks.registry import get_task

CANDIDATE_FILE = "<candidate>"
_KINDS = {kind.value for kind in FailureKind}
_MESSAGE_LIMIT = 4000


class Worker:
    def __init__(self, unconfined_reason: str = "") -> None:
        self.scratch_root = tempfile.mkdtemp(prefix="coevolve-sandbox-")
        os.chmod(self.scratch_root, 0o711)  # the candidate's uid passes through to its own temp dir
        self.tasks: dict[str, Any] = {}
        self.instances: dict[tuple[str, str, str, int], Any] = {}
        self.network_isolated = confine.isolate_network()
        view = None
        if not unconfined_reason:
            unconfined_reason, view = confine.probe(self.scratch_root)
        self.unconfined_reason = unconfined_reason
        self.confined = view is not None
        cgroups, self.memory_fallback_reason = cgroup.find()
        self.confinement = child.Confinement(view, cgroups)
        self._view_key: tuple[int, int] = (0, 0)
        if self.confined:
            self.fork: Callable[[], int] = confine.forker()
        else:
            self.fork = os.fork
            confine.become_subreaper()
            confine.non_dumpable()

    def describe(self) -> dict[str, Any]:
        """What is in force, for the Sandbox's record."""
        view = self.confinement.view
        cgroups = self.confinement.cgroups
        return {"pid": os.getpid(), "network_isolated": self.network_isolated, "confined": self.confined,
                "unconfined_reason": self.unconfined_reason, "scratch_root": self.scratch_root,
                "hidden_view": bool(view and view.hidden),
                "hidden_view_reason": view.why_not_hidden if view else self.unconfined_reason,
                "memory_limit": cgroups.kind if cgroups else "rlimit",
                "memory_limit_reason": self.memory_fallback_reason}

    def _refresh_view(self) -> None:
        """The view follows sys.path and the modules imported (tasks load theirs)."""
        view = self.confinement.view
        key = (hash(tuple(sys.path)), len(sys.modules))
        if view is not None and view.hidden and key != self._view_key:
            view.paths = confine.view_paths()
            self._view_key = key

    # -- task state, kept warm across candidates -------------------------
    def task(self, spec: Any) -> Any:
        """A registry name, or ["class", module, qualname, constructor args]."""
        key = repr(spec)
        if key not in self.tasks:
            if isinstance(spec, str):
                self.tasks[key] = get_task(spec)
            else:
                _, module, qualname, args = spec
                target: Any = importlib.import_module(module)
                for part in qualname.split("."):
                    target = getattr(target, part)
                self.tasks[key] = target(*args)
        return self.tasks[key]

    def instance_set(self, task: Any, split: str, size: int) -> Any:
        key = (type(task).__qualname__, task.name, split, size)
        if key not in self.instances:
            self.instances[key] = task.instances(split, size)
        return self.instances[key]

    # -- jobs -------------------------------------------------------------
    def evaluate(self, job: dict[str, Any]) -> dict[str, Any]:
        split, size = job["split"], job["size"]
        due = time.monotonic() + float(job.get("answer_within_s", math.inf)) - _ANSWER_MARGIN_S
        # the task's own code, before any candidate runs: its failure is no candidate's
        try:
            with _watched(due):
                task = self.task(job["task"])
        except (Exception, StillRunning) as exc:
            return _task_error(job, "the task could not be built", exc)
        try:
            with _watched(due):
                instances = self.instance_set(task, split, size)
        except (Exception, StillRunning) as exc:
            return _task_error(job, f"instances({split!r}, {size}) could not be drawn", exc)
        parameters = template_parameters(task.template, task.function_name)
        limits = Limits(job["timeout_s"], job["memory_mb"], job["output_limit"],
                        stage_cpu_s=float(task.instance_seconds(size)),
                        stages=(f"{split}{size}", instance_count(instances)),
                        decision_bytes=decision_bytes(task, size),
                        environment=_environment(job))
        code, seed = job["code"], int(job.get("seed", PROGRAM_SEED))

        def body(emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
            return decide_in_child(code, task, parameters, instances, emit, seed)

        verdict = self._in_child(body, limits)
        began = time.monotonic()
        # descriptors and the task's note guide the search, which sees training-set results only: a
        # test-set rescore (TSP1000: seconds of crossing counts) skips them
        on_train = (split, size) == tuple(getattr(task, "train", ()) or ())
        try:
            with _watched(due):
                result = _score(verdict, task, instances, describe=on_train)
        except StillRunning as exc:  # at the answer time: 2 x sandbox.timeout_s and a grace, from the Sandbox
            within = float(job["answer_within_s"])
            return _task_error(job, f"scoring the candidate's decisions (score(), instance_scores() or feedback()) "
                               f"ran past the answer time, {within:g} s (2 x sandbox.timeout_s + "
                               f"{within - 2 * float(job['timeout_s']):g} s)", exc)
        result["seconds"] = float(verdict.get("seconds", 0.0)) + (time.monotonic() - began)
        result["output"] = verdict.get("output", "")
        return result

    def run_python(self, job: dict[str, Any]) -> dict[str, Any]:
        code = job["code"]

        def body(emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
            return run_script_in_child(code)

        verdict = self._in_child(body, Limits(job["timeout_s"], job["memory_mb"], job["output_limit"],
                                              environment=_environment(job)))
        result = _typed_failure(verdict) or {"failure": None, "message": ""}
        result["seconds"] = float(verdict.get("seconds", 0.0))
        result["output"] = verdict.get("output", "")
        return result

    def _in_child(self, body: Any, limits: Limits) -> dict[str, Any]:
        self._refresh_view()
        return run_in_child(body, scratch_root=self.scratch_root, limits=limits, fork=self.fork,
                            confinement=self.confinement)


# The task's own code runs in the worker itself (building it, drawing instances, scoring decisions): trusted,
# but it may loop. Watched once a second while it runs (SIGALRM; never around a child's run, whose supervisor
# must not be interrupted): past the job's answer time it stops as the task's failure, named with its line,
# where the Sandbox would have blamed the candidate ("stopped answering"); and once the owner has died it
# stops at once, where it would have gone on as an orphan holding a core.
_ANSWER_MARGIN_S = 2.0  # answer this long before the Sandbox gives up on the worker


class _OwnerDied(BaseException):
    """The Sandbox that owns this worker died while the task's code ran (a BaseException, as StillRunning:
    the task's `except Exception` must not swallow it)."""


@contextmanager
def _watched(due: float) -> Iterator[None]:
    def tick(signum: int, frame: Any) -> None:
        if child._owner_changed():
            raise _OwnerDied()
        if time.monotonic() > due:
            raise StillRunning("still running when the answer was due; a loop that never ends?")

    previous = signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, 1.0, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _task_error(job: dict[str, Any], what: str, exc: BaseException) -> dict[str, Any]:
    """A crash verdict that also says the task failed (`task_error`, one line
    naming the task's file and line): the Sandbox raises it as a TaskError."""
    spec = job["task"]
    name = spec if isinstance(spec, str) else spec[2] if isinstance(spec, list) and len(spec) > 2 else repr(spec)
    line = f"task {name}: {what} in the sandbox worker: {user_frame(exc)}"
    return {**_crash(line), "task_error": line}


def _environment(job: dict[str, Any]) -> dict[str, str]:
    """The variables a task asked for by name (the Sandbox looked them up)."""
    asked = job.get("environment") or {}
    return {str(name): str(value) for name, value in asked.items()}


def decision_bytes(task: Any, size: int) -> int:
    """The most one decision may weigh on the wire, from the task's decision
    shape: what the task declares (`decision_bytes(size)`), else inferred
    for decisions of at most (size + 2)² numbers (a tour or a pick list is
    `size`, a prior matrix with a depot (`size` + 1)²), 8 bytes each."""
    declared = getattr(task, "decision_bytes", None)
    if callable(declared):
        return int(declared(size))
    return 8 * (max(size, 1) + 2) ** 2 + 4096


# -- the trusted side: checking what a child reported ----------------------
def _crash(message: str) -> dict[str, Any]:
    return {"failure": FailureKind.CRASH.value, "message": message, "objective": None}


def _typed_failure(verdict: Any) -> dict[str, Any] | None:
    """The child's failure as a typed verdict, or None when it reports
    success. Anything unexpected in the report is itself a crash verdict."""
    failure = verdict.get("failure")
    if failure is None:
        return None
    message = verdict.get("message", "")
    if not isinstance(failure, str) or failure not in _KINDS:
        return _crash(f"the child reported an unknown failure kind {str(failure)[:40]!r}")
    if not isinstance(message, str):
        message = f"(a {type(message).__name__} instead of a message)"
    return {"failure": failure, "message": message[:_MESSAGE_LIMIT], "objective": None}


def _score(verdict: dict[str, Any], task: Any, instances: Any, describe: bool = True) -> dict[str, Any]:
    failed = _typed_failure(verdict)
    if failed is not None:
        return failed
    decisions = verdict.get("decisions")
    if not isinstance(decisions, list) or len(decisions) != instance_count(instances):
        return _crash(f"the child reported {type(decisions).__name__} decisions, expected a list of "
                      f"{instance_count(instances)} (one per instance)")
    # score() judges the decisions and gives the objective; instance_scores(), where the task has it, gives
    # the per-instance profile (MAP-Elites' descriptors, the notes against the template), computed on the
    # decisions score() accepted. A task that declares score_is_instance_mean (score() is by definition
    # their mean: the ACO tasks' colony runs, too costly to run twice) is scored by the profile's mean,
    # without calling score(). Where score() and the profile's mean disagree, score() is the objective
    # and the profile is kept (check-task holds the template to their agreement).
    per_instance = getattr(task, "instance_scores", None)
    per_instance = per_instance if callable(per_instance) else None
    by_profile = declared_instance_mean(task)  # not a flag a subclass inherits over its own score()
    profile = None
    called = "score()"
    try:
        if not by_profile:
            value = real_number(task.score(decisions, instances), task.score, "score()")
        if per_instance is not None:
            called = "instance_scores()"
            profile = instance_values(per_instance(decisions, instances), per_instance)
        if by_profile:
            value = float(numpy.mean(profile)) if profile else math.nan
    except InvalidSolution as exc:
        return {"failure": FailureKind.INVALID.value, "message": f"invalid solution: {exc}", "objective": None}
    except BadReturn as exc:  # as check-task says it of the template's: the method, its line, what came back
        return {"failure": FailureKind.INVALID.value, "message": f"unusable decisions: {exc}", "objective": None}
    except Exception as exc:  # decisions the checks did not anticipate: still the candidate's fault
        # (the template passed the same code in check-task); the message names the task's line
        return {"failure": FailureKind.INVALID.value,
                "message": f"unusable decisions: {called} raised {raised_in(exc, called)}", "objective": None}
    if not math.isfinite(value):
        # a nan among the instances' values is what made the mean nan: name that instance, not score()
        odd = non_finite(profile, per_instance) if profile else None
        return {"failure": FailureKind.INVALID.value, "message": odd or f"objective is {value}", "objective": None}
    result = {"failure": None, "message": "", "objective": value, "instances": len(decisions)}
    if profile is not None and len(profile) == len(decisions):
        result["profile"] = profile
    # the task's decision descriptors, here on the trusted side from the decisions score() accepted:
    # the candidate shapes them only through what it decided
    behaviour = behaviour_of(task, decisions, instances) if describe else None
    if behaviour is not None:
        result["behaviour"] = behaviour
    note = feedback_of(task, decisions, instances) if describe else ""  # the same side, the same decisions
    if note:
        result["feedback"] = note
    return result


# -- the untrusted side: runs in the candidate's child -----------------------
def _syntax_message(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f"line {exc.lineno}: " if exc.lineno else ""
        return f"SyntaxError: {where}{exc.msg}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _compile(code: str, mode_last_expression: bool = False) -> Any:
    linecache.cache[CANDIDATE_FILE] = (len(code), None, code.splitlines(True), CANDIDATE_FILE)
    if not mode_last_expression:
        return compile(code, CANDIDATE_FILE, "exec")
    return split_last_expression(code)


def split_last_expression(code: str) -> tuple[Any, Any]:
    """Compile `code` REPL-style: if it ends in an expression, that expression
    is compiled separately so its value can be shown, as a notebook would."""
    tree = ast.parse(code, CANDIDATE_FILE)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
        last = compile(last, CANDIDATE_FILE, "eval")
    return compile(tree, CANDIDATE_FILE, "exec"), last


def _raised_in_candidate(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == CANDIDATE_FILE:
            return True
        tb = tb.tb_next
    return False


def _fail(kind: FailureKind, message: str) -> dict[str, Any]:
    return {"failure": kind.value, "message": message}


def _start(code: str, module: str, mode_last_expression: bool = False,
           seed: int = PROGRAM_SEED) -> tuple[Any, dict[str, Any]] | dict[str, Any]:
    """The compiled code and the fresh namespace it runs in (generators seeded), or its syntax failure."""
    try:
        compiled = _compile(code, mode_last_expression)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return _fail(FailureKind.SYNTAX, _syntax_message(exc))
    seed_program_generators(seed)  # tasks/base.py: why
    return compiled, {"__name__": module, "__builtins__": builtins}


def decide_in_child(code: str, task: Any, parameters: list[str], instances: Any,
                    emit: Callable[[dict[str, Any]], None], seed: int = PROGRAM_SEED) -> dict[str, Any]:
    """Compile and load the candidate (its generators seeded with `seed`), check its function, and
    send its decisions to the worker instance by instance (`emit`): what the worker received is
    final, and is the candidate's progress."""
    start = _start(code, "candidate", seed=seed)
    if isinstance(start, dict):
        return start
    compiled, namespace = start
    try:
        exec(compiled, namespace)
    except MemoryError:
        return _fail(FailureKind.MEMORY, "MemoryError while loading the candidate")
    except SystemExit as exc:
        return _fail(FailureKind.CRASH, f"the candidate called sys.exit({exc.code!r}) while loading")
    except BaseException as exc:
        return _fail(FailureKind.EXCEPTION, "while loading the candidate:\n" + traceback_tail(exc))

    name = task.function_name
    function = namespace.get(name)
    if not callable(function):
        defined = sorted(key for key, value in namespace.items() if inspect.isfunction(value))
        return _fail(FailureKind.MISSING_FUNCTION, f"no function {name!r} defined (found: {', '.join(defined) or 'none'})")
    try:
        inspect.signature(function).bind(*parameters)
    except TypeError as exc:
        return _fail(FailureKind.BAD_SIGNATURE, f"{name} must accept ({', '.join(parameters)}): {exc}")
    except ValueError:
        pass  # builtins without a signature: let the call decide
    emit({"loaded": True})

    try:
        for decision in task.decide(function, instances):
            emit({"decision": decision})
    except InvalidSolution as exc:
        return _fail(FailureKind.INVALID, f"invalid solution: {exc}")
    except (MemoryError, SystemExit) as exc:
        return _memory_or_exit(exc, "the candidate")
    except RecursionError as exc:
        return _fail(FailureKind.EXCEPTION, traceback_tail(exc))
    except Exception as exc:
        # An error in the task's own loop, after the heuristic returned, means
        # the returned value was unusable (None, a string, a bad index).
        kind = FailureKind.EXCEPTION if _raised_in_candidate(exc) else FailureKind.INVALID
        return _fail(kind, traceback_tail(exc))
    except BaseException as exc:
        return _fail(FailureKind.CRASH, traceback_tail(exc))
    return {"failure": None, "message": ""}


def run_script_in_child(code: str) -> dict[str, Any]:
    start = _start(code, "__main__", mode_last_expression=True)
    if isinstance(start, dict):
        return start
    (statements, last_expression), namespace = start
    try:
        exec(statements, namespace)
        if last_expression is not None:
            value = eval(last_expression, namespace)
            if value is not None:
                print(repr(value))
    except (MemoryError, SystemExit) as exc:
        return _memory_or_exit(exc, "the code")
    except BaseException as exc:
        return _fail(FailureKind.EXCEPTION, traceback_tail(exc))
    return {"failure": None, "message": ""}


def _memory_or_exit(exc: MemoryError | SystemExit, who: str) -> dict[str, Any]:
    """The typed failure for running out of memory or calling sys.exit, the
    same for heuristics and scripts: neither is the code's own exception."""
    if isinstance(exc, MemoryError):
        return _fail(FailureKind.MEMORY, "MemoryError: out of memory")
    return _fail(FailureKind.CRASH, f"{who} called sys.exit({exc.code!r})")


# -- the loop ------------------------------------------------------------------
def _wait_for_job(read_fd: int) -> None:
    """Block until the owner sends something (or closes the pipe); exit if
    the owner died while some other process keeps the pipe open."""
    while not select.select([read_fd], [], [], 1.0)[0]:
        if child._owner_changed():
            raise wire.PeerGone()


def main() -> None:
    # The protocol owns the original stdin/stdout; anything printed in the
    # worker itself goes to stderr and cannot corrupt a message.
    read_fd, write_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    # No parent-death signal: it fires when the *thread* that started the
    # worker exits, and the Sandbox starts workers from pool threads. The
    # worker watches its owner's pipe and its parent instead (child.watch_owner).
    # Without root, a user namespace gives the same confinement; the variable
    # takes that path as root too (how the tests cover it).
    user_namespace = os.geteuid() != 0 or os.environ.get("COEVOLVE_SANDBOX_USERNS") == "1"
    failure = confine.enter_user_namespace([read_fd, write_fd]) if user_namespace else ""
    child.watch_owner(read_fd)
    worker = Worker(failure)
    handlers = {"evaluate": worker.evaluate, "python": worker.run_python}
    try:
        while True:
            try:
                _wait_for_job(read_fd)
                job = wire.recv(read_fd)
            except wire.PeerGone:
                return
            op = job.get("op") if isinstance(job, dict) else None
            if op == "hello":
                # the parent's search order, then the worker's own entries: entries the parent appended late
                # (setuptools adds its _vendor folder once imported) must stay behind site-packages, or a
                # vendored old typing_extensions shadows the installed one
                parent = [entry for entry in job.get("sys_path", []) if isinstance(entry, str)]
                sys.path[:] = list(dict.fromkeys([*parent, *sys.path]))
                reply: dict[str, Any] = worker.describe()
            else:
                try:
                    reply = handlers[op](job)
                except (child._OwnerGone, _OwnerDied):
                    return
                except Exception:
                    reply = _crash("the sandbox worker failed outside the candidate:\n"
                                   + traceback.format_exc(limit=8)[-3000:])
            try:
                wire.send(write_fd, reply)
            except BrokenPipeError:
                return  # the Sandbox is gone
    finally:
        child.remove_tree(worker.scratch_root)


if __name__ == "__main__":
    main()
