"""A warm sandbox worker: `python -m coevolve.sandbox.worker`.

It imports numpy and the task modules once, caches instance sets, and for
each job forks a fresh child (coevolve.sandbox.child) so that nothing a
candidate does survives into the next one. Talks to the Sandbox over its
stdin/stdout with coevolve.sandbox.wire messages.
"""

from __future__ import annotations

import ast
import builtins
import ctypes
import importlib
import inspect
import linecache
import math
import os
import sys
import tempfile
import traceback
from typing import Any

# One BLAS thread: the pool already runs one worker per core, and a
# single-threaded worker is safe to fork.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy  # noqa: E402,F401  (warm import, inherited by every child)

from coevolve.sandbox import wire  # noqa: E402
from coevolve.sandbox.child import become_subreaper, run_in_child, traceback_tail  # noqa: E402
from coevolve.sandbox.results import FailureKind  # noqa: E402

CANDIDATE_FILE = "<candidate>"
_CLONE_NEWNET = 0x40000000


def isolate_network() -> bool:
    """Move this worker (and so every child) into an empty network namespace.
    Needs CAP_SYS_ADMIN; without it the socket guard in the child remains."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.unshare(_CLONE_NEWNET) == 0


class Worker:
    def __init__(self, protocol_fds: list[int]) -> None:
        self.protocol_fds = protocol_fds
        self.scratch_root = tempfile.mkdtemp(prefix="coevolve-sandbox-")
        self.tasks: dict[str, Any] = {}
        self.instances: dict[tuple[str, str, str, int], Any] = {}

    # -- task state, kept warm across candidates -------------------------
    def task(self, spec: Any) -> Any:
        """A registry name, ("class", module, qualname), or a task object."""
        if not isinstance(spec, (str, tuple)):
            return spec
        key = repr(spec)
        if key not in self.tasks:
            if isinstance(spec, str):
                from tasks.registry import get_task

                self.tasks[key] = get_task(spec)
            else:
                _, module, qualname = spec
                target: Any = importlib.import_module(module)
                for part in qualname.split("."):
                    target = getattr(target, part)
                self.tasks[key] = target()
        return self.tasks[key]

    def instance_set(self, task: Any, split: str, size: int) -> Any:
        key = (type(task).__qualname__, task.name, split, size)
        if key not in self.instances:
            self.instances[key] = task.instances(split, size)
        return self.instances[key]

    # -- jobs -------------------------------------------------------------
    def evaluate(self, job: dict[str, Any]) -> dict[str, Any]:
        from coevolve.codeparse import template_parameters

        task = self.task(job["task"])
        instances = self.instance_set(task, job["split"], job["size"])
        parameters = template_parameters(task.template, task.function_name)
        try:
            compiled = compile(job["code"], CANDIDATE_FILE, "exec")
        except (SyntaxError, ValueError) as exc:
            return {"failure": FailureKind.SYNTAX.value, "message": _syntax_message(exc),
                    "seconds": 0.0, "output": ""}
        linecache.cache[CANDIDATE_FILE] = (len(job["code"]), None, job["code"].splitlines(True), CANDIDATE_FILE)

        def body() -> dict[str, Any]:
            return score_candidate(compiled, task, parameters, instances)

        return self._in_child(body, job)

    def run_python(self, job: dict[str, Any]) -> dict[str, Any]:
        code = job["code"]
        try:
            statements, last_expression = split_last_expression(code)
        except (SyntaxError, ValueError) as exc:
            return {"failure": FailureKind.SYNTAX.value, "message": _syntax_message(exc),
                    "seconds": 0.0, "output": ""}
        linecache.cache[CANDIDATE_FILE] = (len(code), None, code.splitlines(True), CANDIDATE_FILE)

        def body() -> dict[str, Any]:
            namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
            try:
                exec(statements, namespace)
                if last_expression is not None:
                    value = eval(last_expression, namespace)
                    if value is not None:
                        print(repr(value))
            except MemoryError:
                return {"failure": FailureKind.MEMORY.value, "message": "MemoryError: out of memory"}
            except SystemExit as exc:
                return {"failure": FailureKind.CRASH.value, "message": f"the code called sys.exit({exc.code!r})"}
            except BaseException as exc:
                return {"failure": FailureKind.EXCEPTION.value, "message": traceback_tail(exc)}
            return {"failure": None, "message": ""}

        return self._in_child(body, job)

    def _in_child(self, body: Any, job: dict[str, Any]) -> dict[str, Any]:
        return run_in_child(
            body,
            scratch_root=self.scratch_root,
            timeout_s=job["timeout_s"],
            memory_mb=job["memory_mb"],
            output_limit=job["output_limit"],
            close_fds=self.protocol_fds,
        )


def _syntax_message(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f"line {exc.lineno}: " if exc.lineno else ""
        return f"SyntaxError: {where}{exc.msg}"
    return f"{type(exc).__name__}: {exc}"


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


def score_candidate(compiled: Any, task: Any, parameters: list[str], instances: Any) -> dict[str, Any]:
    """Runs inside the child: load the candidate, check it, score it."""
    from tasks.base import InvalidSolution

    def fail(kind: FailureKind, message: str) -> dict[str, Any]:
        return {"failure": kind.value, "message": message, "objective": None}

    namespace: dict[str, Any] = {"__name__": "candidate", "__builtins__": builtins}
    try:
        exec(compiled, namespace)
    except MemoryError:
        return fail(FailureKind.MEMORY, "MemoryError while loading the candidate")
    except SystemExit as exc:
        return fail(FailureKind.CRASH, f"the candidate called sys.exit({exc.code!r}) while loading")
    except BaseException as exc:
        return fail(FailureKind.EXCEPTION, "while loading the candidate:\n" + traceback_tail(exc))

    name = task.function_name
    function = namespace.get(name)
    if not callable(function):
        defined = sorted(key for key, value in namespace.items() if inspect.isfunction(value))
        return fail(FailureKind.MISSING_FUNCTION,
                    f"no function {name!r} defined (found: {', '.join(defined) or 'none'})")
    try:
        inspect.signature(function).bind(*parameters)
    except TypeError as exc:
        return fail(FailureKind.BAD_SIGNATURE,
                    f"{name} must accept ({', '.join(parameters)}): {exc}")
    except ValueError:
        pass  # builtins without a signature: let the call decide

    try:
        objective = task.evaluate(function, instances)
    except InvalidSolution as exc:
        return fail(FailureKind.INVALID, f"invalid solution: {exc}")
    except MemoryError:
        return fail(FailureKind.MEMORY, "MemoryError: out of memory")
    except SystemExit as exc:
        return fail(FailureKind.CRASH, f"the candidate called sys.exit({exc.code!r})")
    except RecursionError as exc:
        return fail(FailureKind.EXCEPTION, traceback_tail(exc))
    except Exception as exc:
        # An error inside the evaluator, after the heuristic returned, means
        # the returned value was unusable (None, a string, a bad index).
        kind = FailureKind.EXCEPTION if _raised_in_candidate(exc) else FailureKind.INVALID
        return fail(kind, traceback_tail(exc))
    except BaseException as exc:
        return fail(FailureKind.CRASH, traceback_tail(exc))
    try:
        value = float(objective)
    except (TypeError, ValueError):
        return fail(FailureKind.INVALID, f"the evaluator returned a non-number: {objective!r}")
    if not math.isfinite(value):
        return fail(FailureKind.INVALID, f"objective is {value}")
    return {"failure": None, "message": "", "objective": value, "instances": _count(instances)}


def _count(instances: Any) -> int:
    try:
        return len(instances)
    except TypeError:
        return 1


def main() -> None:
    # The protocol owns the original stdin/stdout; anything printed in the
    # worker itself goes to stderr and cannot corrupt a message.
    read_fd, write_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    # No parent-death signal here: it fires when the *thread* that started
    # the worker exits, and the Sandbox starts workers from pool threads.
    # The worker exits on EOF from its stdin instead.
    become_subreaper()
    network_isolated = isolate_network()

    worker = Worker([read_fd, write_fd])
    handlers = {"evaluate": worker.evaluate, "python": worker.run_python}
    try:
        while True:
            try:
                job = wire.recv(read_fd)
            except wire.PeerGone:
                return
            op = job.get("op")
            if op == "hello":
                for entry in reversed(job.get("sys_path", [])):
                    if entry not in sys.path:
                        sys.path.insert(0, entry)
                reply: dict[str, Any] = {"pid": os.getpid(), "network_isolated": network_isolated,
                                         "scratch_root": worker.scratch_root}
            else:
                try:
                    reply = handlers[op](job)
                except Exception:
                    reply = {"error": traceback.format_exc(limit=8)}
            try:
                wire.send(write_fd, reply)
            except BrokenPipeError:
                return  # the Sandbox is gone
    finally:
        import shutil

        shutil.rmtree(worker.scratch_root, ignore_errors=True)


if __name__ == "__main__":
    main()
