"""Checks of a heuristic task's contract (tasks/base.py) that need no sandbox.

`shape_problems` is cheap (attributes, types, the template's function,
splits, limits): `coevolve run` and `compare` run it before they load the
LLM. `determinism_problems` draws instance sets twice; `coevolve
check-task` adds it and the checks that go through the real sandbox.
Each problem is one line naming the attribute or function and what was expected.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import math
import signal
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import declared_behaviour, declared_cascade
from tasks.loader import user_frame

MAX_INSTANCE_SECONDS = 3600.0  # a larger per-instance limit is a typo (ms for s), not a plan


class StillRunning(BaseException):
    """A checked call of the user's task ran past its time limit. A BaseException,
    so that the checks' own `except Exception` (a call that raised) let it through."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Run the block with an alarm: after `seconds` of wall time it raises
    StillRunning naming `what` and the user's line it was on. The task's code runs
    in this process (it is trusted, unlike a candidate), so a loop that never ends
    would otherwise hang the check with no word. Only in the main thread (signals);
    elsewhere, or with seconds <= 0, no limit."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    # An alarm already set (pytest-timeout's, an outer limit) is kept: the sooner of the two rings first,
    # and the outer one is set again, less the time spent here, when the block ends.
    outer = signal.getsignal(signal.SIGALRM)
    outer_left, outer_every = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()

    def ring(signum: int, frame: Any) -> None:
        nonlocal outer_left
        elapsed = time.monotonic() - started
        if outer_left and elapsed >= outer_left - 1e-3 and callable(outer):
            outer_left = 0.0  # rung: its handler decides (it may raise)
            outer(signum, frame)
            if elapsed < seconds:  # it did not stop the block: this limit still holds
                signal.setitimer(signal.ITIMER_REAL, seconds - elapsed)
                return
        raise StillRunning(f"{what}: still running after {seconds:g} s")

    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_left) if outer_left else seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 1e-3), outer_every)


# what gives a check longer, by the command that runs it
LONGER = "`coevolve check-task --stage-seconds S` gives each check longer"


def overdue(exc: StillRunning, longer: str = LONGER) -> str:
    """The one line for a check that ran past its limit: what, for how long, the user's line it was on."""
    where = user_frame(exc).partition(" (at ")[2]
    return f"{exc}{f' (at {where}' if where else ''}; a loop that never ends? ({longer})"


def shape_problems(task: Any) -> list[str]:
    """What is missing or mistyped in a heuristic task; [] when its shape is right."""
    problems = []
    expected = {"name": str, "description": str, "function_name": str, "template": str}
    for attribute, kind in expected.items():
        value = getattr(task, attribute, None)
        if not isinstance(value, kind) or not value.strip():
            problems.append(f"{attribute}: expected a non-empty {kind.__name__}, got {shown(value)}")
    direction = getattr(task, "direction", None)
    if direction not in ("min", "max"):
        problems.append(f"direction: expected \"min\" or \"max\", got {shown(direction)}")
    if problems:
        return problems
    if not task.function_name.isidentifier():
        problems.append(f"function_name: {task.function_name!r} is not a Python identifier")
    problems += template_problems(task.template, task.function_name)
    try:
        splits = task.splits()
    except Exception as exc:
        return problems + [f"splits(): raised {_error(exc)}"]
    if not isinstance(splits, dict) or not splits or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and v and all(_is_int(s) for s in v)
            for k, v in splits.items()):
        return problems + [f"splits(): expected {{split name: [sizes]}} with at least one split and int sizes, "
                           f"got {shown(splits)}"]
    train = getattr(task, "train", None)
    if not (isinstance(train, (tuple, list)) and len(train) == 2 and isinstance(train[0], str) and _is_int(train[1])):
        problems.append(f"train: expected a (split, size) pair such as (\"train\", 50), got {shown(train)}")
    elif train[0] not in splits or train[1] not in splits[train[0]]:
        problems.append(f"train: {tuple(train)} is not one of splits() ({shown(splits)})")
    problems += cascade_problems(task, splits)
    try:
        declared_behaviour(task)
    except ValueError as exc:
        problems.append(str(exc))
    flag = getattr(task, "score_is_instance_mean", False)
    if not isinstance(flag, bool):
        problems.append(f"score_is_instance_mean: expected True or False, got {shown(flag)}")
    elif flag and not callable(getattr(task, "instance_scores", None)):
        problems.append("score_is_instance_mean: True, but the task has no instance_scores() whose mean score() "
                        "would be; drop it or define instance_scores(decisions, instances)")
    if hasattr(task, "feedback") and not callable(task.feedback):
        problems.append(f"feedback: expected a method feedback(decisions, instances) -> str, got {shown(task.feedback)}")
    for split, sizes in splits.items():
        for size in sizes:
            try:
                limit = float(task.instance_seconds(size))
            except Exception as exc:
                problems.append(f"instance_seconds({size}): raised {_error(exc)}")
                continue
            if not (math.isfinite(limit) and 0 < limit <= MAX_INSTANCE_SECONDS):
                problems.append(f"instance_seconds({size}): expected CPU seconds in (0, {MAX_INSTANCE_SECONDS:g}], "
                                f"got {limit!r}")
    return problems


def declared_instance_mean(task: Any) -> bool:
    """Whether the sandbox scores `task` by the mean of its `instance_scores` without calling `score()`:
    it declares `score_is_instance_mean = True` (score() is by definition that mean), has
    instance_scores(), and the declaration stands beside or below both methods. A subclass that
    overrides score() (to add a check) or instance_scores() under an inherited flag is not vouched for
    by it: the sandbox then calls score() as for any task."""
    if getattr(task, "score_is_instance_mean", False) is not True or not callable(getattr(task, "instance_scores", None)):
        return False
    mro = type(task).__mro__

    def depth(name: str) -> int:  # how far up the class chain `name` is defined (-1: on the object itself)
        if name in getattr(task, "__dict__", {}):
            return -1
        return next((i for i, cls in enumerate(mro) if name in vars(cls)), len(mro))

    flag = depth("score_is_instance_mean")
    return flag <= depth("score") and flag <= depth("instance_scores")


def cascade_problems(task: Any, splits: dict[str, list[int]]) -> list[str]:
    """A declared evaluation cascade must be well formed and name one of splits()."""
    try:
        cascade = declared_cascade(task)
    except ValueError as exc:
        return [str(exc)]
    if cascade is None:
        return []
    split, size = cascade.stage
    if split not in splits or size not in splits[split]:
        return [f"cascade_stage: {cascade.stage} is not one of splits() ({shown(splits)})"]
    if cascade.stage == tuple(task.train):
        return [f"cascade_stage: {cascade.stage} is the training set itself; name a cheaper set (a few instances)"]
    return []


def template_problems(template: str, function_name: str) -> list[str]:
    """The template must parse and define `function_name` at its top level with positional parameters."""
    try:
        tree = ast.parse(template)
    except SyntaxError as exc:
        return [f"template: SyntaxError at line {exc.lineno}: {exc.msg}"]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function_name:
            if isinstance(node, ast.AsyncFunctionDef):
                return [f"template: {function_name} must be a plain def, not async"]
            if not node.args.posonlyargs + node.args.args:
                return [f"template: {function_name}() takes no parameters; the task's decide() passes them"]
            return []
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [f"template: does not define function_name {function_name!r} at top level "
            f"(it defines: {', '.join(defined) or 'no function'})"]


def determinism_problems(factory: Callable[[], Any], split: str, size: int) -> list[str]:
    """The set (split, size) drawn by two fresh task objects must be equal."""
    try:
        first = factory().instances(split, size)
        second = factory().instances(split, size)
    except Exception as exc:
        return [f"instances({split!r}, {size}): raised {_error(exc)}"]
    if not same_data(first, second):
        return [f"instances({split!r}, {size}): two draws differ; draw from a fixed seed "
                "(e.g. tasks.base.SeededSets or np.random.RandomState(seed)), never from global randomness"]
    return []


def same_data(a: Any, b: Any) -> bool:
    """Equality of nested lists, tuples, dicts, numbers and numpy arrays (NaN equals NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_data(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_data(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        # field by field: a generated __eq__ compares array fields with ==, which cannot say True or False
        return all(same_data(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except Exception:
        return False


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _error(exc: BaseException) -> str:
    return user_frame(exc)
