"""Checks of a heuristic task's contract (tasks/base.py) that need no sandbox.

`shape_problems` is cheap (attributes, types, method signatures, the
template's function, splits, limits): `coevolve run` and `compare` run it before they load the
LLM. `determinism_problems` draws instance sets twice; `coevolve
check-task` adds it and the checks that go through the real sandbox.
Each problem is one line naming the attribute or function and what was expected.
"""

from __future__ import annotations

import ast
import contextlib
import copyreg
import dataclasses
import inspect
import math
import numbers
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import REFERENCE_KINDS, Reference, declared_behaviour, declared_cascade
from tasks.loader import TaskExited, exited, guarded, raised_in, user_frame

MAX_INSTANCE_SECONDS = 3600.0  # a larger per-instance limit is a typo (ms for s), not a plan


class StillRunning(BaseException):
    """A checked call of the user's task ran past its time limit. A BaseException,
    so that the checks' own `except Exception` (a call that raised) let it through."""


class Exited(StillRunning):
    """A checked call of the user's task tried to end the process (tasks.loader.guarded); its message
    is the whole line (tasks.loader.exited). A StillRunning, so that every caller of `time_limit`
    stops the check and writes its one line (`overdue`) as for a call that never returned."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str, code: str = "a task's code") -> Iterator[None]:
    """Run the block with an alarm: after `seconds` of wall time it raises
    StillRunning naming `what` and the user's line it was on. The task's code runs
    in this process (it is trusted, unlike a candidate), so a loop that never ends
    would otherwise hang the check with no word. Only in the main thread (signals);
    elsewhere, or with seconds <= 0, no limit. Whatever the limit, the block is
    `guarded`: task code that exits (sys.exit, os._exit, its own KeyboardInterrupt)
    raises Exited naming its line (and `code`, whose it is) instead of ending the command with no word."""
    try:
        with guarded(), _alarm(seconds, what):
            yield
    except TaskExited as exc:
        raise Exited(exited(exc, what, code)) from None


@contextlib.contextmanager
def _alarm(seconds: float, what: str) -> Iterator[None]:
    """time_limit's alarm."""
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
    if isinstance(exc, Exited):
        return str(exc)  # the whole line already; waiting longer would not help
    where = user_frame(exc).partition(" (at ")[2]
    return f"{exc}{f' (at {where}' if where else ''}; a loop that never ends? ({longer})"


# -- what a task's methods return --------------------------------------------------------------------
# One check for check-task (the template's) and the sandbox worker (every candidate's), so a value the
# framework cannot use is named the same way in both: the method, where it is defined, what came back.
REAL = "a real number (an int or a float, numpy's too; not a bool)"


class BadReturn(TypeError):
    """A task's method returned what the framework cannot use; the message is the whole line."""


def defined_at(method: Any) -> str:
    """` at file:line` of a task's method's def (bound or not, decorated or not); "" for one without Python code."""
    try:
        function = inspect.unwrap(getattr(method, "__func__", method))
    except ValueError:  # a wrapper chain that loops
        return ""
    code = getattr(function, "__code__", None)
    return f" at {code.co_filename}:{code.co_firstlineno}" if code is not None else ""


def _is_real(value: Any) -> bool:
    # a bool is a verdict, not an objective: `return cost < best` where `return cost` was meant
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def real_number(value: Any, method: Any, called: str) -> float:
    """`value`, what the task's `method` (`called`, e.g. "score()") returned, as a float; BadReturn
    naming the method's def line and what came back when it is not a real number (a numeric string,
    None, an array: float() took some of them, then raised naming no line). nan and inf pass: the
    caller says where a value must be finite."""
    if not _is_real(value):
        raise BadReturn(f"{called}{defined_at(method)} returned {shown(value)} (a {type(value).__name__}), "
                        f"expected {REAL}")
    return float(value)


def instance_values(values: Any, method: Any, called: str = "instance_scores()") -> list[float]:
    """What `instance_scores` returned, one float per instance; BadReturn naming the method's def line and
    the first value (by its index) that is not a real number, or the whole when it is not a sequence."""
    try:
        items = list(values) if not isinstance(values, (str, bytes, dict)) else None
    except TypeError:
        items = None
    if items is None:
        raise BadReturn(f"{called}{defined_at(method)} returned {shown(values)} (a {type(values).__name__}), "
                        f"expected a list of real numbers, one per instance")
    for index, value in enumerate(items):
        if not _is_real(value):
            raise BadReturn(f"{called}{defined_at(method)} returned {shown(value)} (a {type(value).__name__}) at "
                            f"index {index}, expected {REAL}")
    return [float(value) for value in items]


def non_finite(profile: list[float], method: Any, called: str = "instance_scores()") -> str | None:
    """The line naming the first per-instance value that is nan or inf (by its index), None when all are
    finite: a mean objective over them is nan, and saying so of score() would blame the wrong method."""
    index = next((i for i, value in enumerate(profile) if not math.isfinite(value)), None)
    if index is None:
        return None
    return (f"{called}{defined_at(method)} gave {profile[index]} at index {index} (of {len(profile)} instances), "
            "expected a finite number")


# how a task says a set has no reference, in the line that says it did otherwise
NO_REFERENCE = "return None for a set without one"


def checked_reference(task: Any, split: str, size: int) -> tuple[Reference | None, str]:
    """`task.reference(split, size)`, the task's own code run in this process, as a Reference with a float
    value, and "" — or None and the one line saying why there is none to use: it raised (a
    NotImplementedError is a declared none, as None is), or returned other than None or a
    tasks.base.Reference (or an object of its fields) of a finite value, a kind of REFERENCE_KINDS and a
    str source. A run, `coevolve eval` and a comparison take that as no reference and warn with the line
    (their work stands: a reference gives only the gap); check-task fails on it. Code that exits is
    `guarded`: TaskExited, for the caller's one line (tasks.loader.exited), as before."""
    called = f"reference({split!r}, {size})"
    try:
        with guarded(called):
            value = task.reference(split, size)
    except NotImplementedError:
        return None, ""
    except Exception as exc:
        return None, f"{called} raised {raised_in(exc, 'reference()')}; {NO_REFERENCE}"
    if value is None:
        return None, ""
    at = defined_at(getattr(task, "reference", None))
    # a Reference, or an object of the same fields (a test's fake, a task's own dataclass): what is read
    if not all(hasattr(value, field.name) for field in dataclasses.fields(Reference)):
        return None, (f"{called}{at} returned {shown(value)} (a {type(value).__name__}), expected "
                      f"tasks.base.Reference(value, kind, source) or None ({NO_REFERENCE})")
    fault = _reference_fault(value)
    if fault:
        return None, f"{called}{at} returned {shown(value)}: {fault}"
    return Reference(float(value.value), value.kind, value.source), ""


def _reference_fault(reference: Any) -> str:
    """What is wrong with a Reference's fields, "" when nothing (the dataclass checks none of them)."""
    if not _is_real(reference.value):
        return f"its value is {shown(reference.value)}, expected {REAL}"
    if not math.isfinite(reference.value):
        return f"its value is {reference.value}, expected a finite number"
    if reference.kind not in REFERENCE_KINDS:
        return f"its kind is {shown(reference.kind)}, expected one of {', '.join(map(repr, REFERENCE_KINDS))}"
    if not isinstance(reference.source, str):
        return f"its source is {shown(reference.source)}, expected a str (where the value comes from)"
    return ""


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
    problems += template_problems(task.template, task.function_name, template_file(task))
    calls = signature_problems(task)
    if calls:  # calling splits() and instance_seconds() below would only repeat them as bare TypeErrors
        return problems + calls
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


# How the framework calls a heuristic task's methods, every argument by position (tasks/base.py
# HeuristicTask; the optional methods listed under it where the task defines them). A signature that
# cannot take its call fails later as a bare TypeError naming neither the file nor the expected call.
PROTOCOL_CALLS: dict[str, tuple[str, ...]] = {
    "splits": (), "instances": ("split", "size"), "decide": ("fn", "instances"),
    "score": ("decisions", "instances"), "instance_seconds": ("size",), "reference": ("split", "size"),
    "instance_scores": ("decisions", "instances"), "describe_decisions": ("decisions", "instances"),
    "feedback": ("decisions", "instances"), "decision_bytes": ("size",),
}


def signature_problems(task: Any) -> list[str]:
    """One line per method of `task` whose signature cannot take the framework's call (PROTOCOL_CALLS):
    too many or too few positional parameters, or a keyword-only one without a default; *args,
    **kwargs and defaults are fine. A method that is missing is the loader's to name."""
    problems = []
    for name, arguments in PROTOCOL_CALLS.items():
        method = getattr(task, name, None)
        if not callable(method):
            continue
        try:
            signature = inspect.signature(method)  # bound: without self
        except (TypeError, ValueError):
            continue  # a C callable with no readable signature: its call will tell
        try:
            signature.bind(*arguments)
        except TypeError:
            problems.append(f"{_written(name, method)} {_takes(signature, len(arguments))}; "
                            f"the framework calls {name}({', '.join(arguments)})")
    return problems


def _written(name: str, method: Any) -> str:
    """`name(self, a, b) at file:line` as the user wrote it (annotations left out: the count matters)."""
    function = inspect.unwrap(getattr(method, "__func__", method))
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        signature = inspect.signature(method)
    bare = signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                             return_annotation=signature.empty)
    code = getattr(function, "__code__", None)
    return f"{name}{bare}" + (f" at {code.co_filename}:{code.co_firstlineno}" if code is not None else "")


def _takes(signature: inspect.Signature, given: int) -> str:
    """What `signature` (a bound method's) takes, in words, when a call with `given` positional arguments fails."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = list(signature.parameters.values())
    positional = [p for p in parameters if p.kind in kinds]
    required = sum(p.default is p.empty for p in positional)
    spread = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    if required <= given and (spread or given <= len(positional)):  # the count fits: a keyword-only one does not
        keywords = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is p.empty]
        return f"needs the keyword argument{'s' * (len(keywords) > 1)} {', '.join(keywords)}"
    if spread:
        return f"takes at least {required} argument{'s' * (required != 1)}"
    if required == len(positional):
        return f"takes {required or 'no'} argument{'s' * (required != 1)}"
    return f"takes {required} to {len(positional)} arguments"


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


def template_problems(template: str, function_name: str, origin: tuple[str, str] | None = None) -> list[str]:
    """The template must parse and define `function_name` at its top level with positional parameters.
    `origin`, the task's file and its text (`template_file`), has a problem name the file's line."""
    try:
        tree = ast.parse(template)
    except SyntaxError as exc:
        where = template_line(origin, template, exc.lineno)
        return [f"template: SyntaxError at line {exc.lineno}: {exc.msg}{f' ({where})' if where else ''}"]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function_name:
            if isinstance(node, ast.AsyncFunctionDef):
                return [f"template: {function_name} must be a plain def, not async"]
            if not node.args.posonlyargs + node.args.args:
                return [f"template: {function_name}() takes no parameters; the task's decide() passes them"]
            return []
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) == 1:  # renamed: either name may be the one meant
        where = template_line(origin, template, defs[0].lineno)
        fix = (f"{f'its def is at {where}: ' if where else ''}name it {function_name}, "
               f"or set function_name = {defs[0].name!r}")
    else:
        where = template_line(origin, template, 1)
        fix = f"define {function_name} in it{f' (the template starts at {where})' if where else ''}"
    return [f"template: does not define function_name {function_name!r} at top level "
            f"(it defines: {', '.join(n.name for n in defs) or 'no function'}); {fix}"]


def template_file(task: Any) -> tuple[str, str] | None:
    """The file that defines the task's class and its text, for a template problem to name its line; None
    when it cannot be read (a class made at run time)."""
    try:
        path = inspect.getsourcefile(type(task))
        return (path, Path(path).read_text(encoding="utf-8")) if path else None
    except (OSError, TypeError, UnicodeDecodeError):
        return None


def template_line(origin: tuple[str, str] | None, template: str, line: int | None) -> str:
    """`path:N`, where the template's `line` is in the task's file (`origin`): exact where the file holds
    the template's text as it is (a triple-quoted string), else the one file line holding that line's text
    (an escaped one-line string); the path alone when neither says; "" without a file."""
    if origin is None:
        return ""
    path, source = origin
    lines = template.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return path
    start = source.find(template)
    if start >= 0:
        above = source.count("\n", 0, start)
        return f"{path}:{above + line}"
    text = lines[line - 1].strip()
    holding = [n for n, row in enumerate(source.splitlines(), 1) if text and text in row]
    return f"{path}:{holding[0]}" if len(holding) == 1 else path


def determinism_problems(factory: Callable[[], Any], split: str, size: int) -> list[str]:
    """The set (split, size) drawn by two fresh task objects must be equal."""
    try:
        first = factory().instances(split, size)
        second = factory().instances(split, size)
    except Exception as exc:
        return [f"instances({split!r}, {size}): raised {_error(exc)}"]
    try:
        same = same_data(first, second)
    except Incomparable as exc:  # not a verdict on randomness: say what cannot be compared
        return [f"instances({split!r}, {size}): cannot tell whether two draws are equal: {exc}"]
    if not same:
        return [f"instances({split!r}, {size}): two draws differ; draw from a fixed seed "
                "(e.g. tasks.base.SeededSets or np.random.RandomState(seed)), never from global randomness"]
    return []


class Incomparable(Exception):
    """Two draws hold a value whose content cannot be compared; the message names where and what."""


# what a task whose instances cannot be compared can do instead
COMPARABLE = ("give your instance class an __eq__ (e.g. make it a dataclass), or hold the data in arrays, lists, "
              "dicts and numbers")


def same_data(a: Any, b: Any) -> bool:
    """Equality of nested lists, tuples, dicts, numbers and numpy arrays (NaN equals NaN), dataclasses
    field by field, and objects without an __eq__ of their own (for which `==` is identity, so two equal
    draws would always differ) by what they hold: what pickle would save of them, their __dict__ or
    __slots__. Incomparable when a value's content cannot be seen (a generator, a lock) or its `==`
    cannot say True or False."""
    return _same(a, b, "", set())


def _same(a: Any, b: Any, where: str, seen: set[tuple[int, int]]) -> bool:
    if a is b:  # one object shared by both draws (a module-level cache): equal, whatever it is
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        if a.dtype.kind == "O":  # objects inside: element by element, as a list of them
            return all(_same(x, y, f"{where}[{i}]", seen) for i, (x, y) in enumerate(zip(a.flat, b.flat)))
        return bool(np.array_equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(
            _same(x, y, f"{where}[{i}]", seen) for i, (x, y) in enumerate(zip(a, b)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], f"{where}[{k!r}]", seen) for k in a)
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        # field by field: a generated __eq__ compares array fields with ==, which cannot say True or False
        return all(_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", seen)
                   for f in dataclasses.fields(a))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a).__eq__ is object.__eq__:  # == is identity: compare what the two objects hold
        if type(a) is not type(b):
            return False
        if (id(a), id(b)) in seen:  # a cycle (a node that points back): equal as far as it goes
            return True
        seen.add((id(a), id(b)))
        first, second = _content(a, where), _content(b, where)
        if isinstance(first, dict) and isinstance(second, dict):  # attributes: named in `where`
            return first.keys() == second.keys() and all(
                _same(first[k], second[k], f"{where}.{k}", seen) for k in first)
        return _same(first, second, where, seen)
    try:
        return bool(a == b)
    except Exception as exc:
        raise Incomparable(f"{where or 'the set'} is a {type(a).__name__}: its == raised {type(exc).__name__} "
                           f"({str(exc)[:120]}) instead of True or False; {COMPARABLE}") from None


def _content(value: Any, where: str) -> Any:
    """What an object that compares by identity holds: its attributes ({name: value}, from __dict__ and
    __slots__) where its pickling is the default one, else the parts its own pickling saves (a C type's
    fields); Incomparable when pickle cannot save it either (nothing else tells two of them apart)."""
    try:
        reduced = type(value).__reduce_ex__(value, 4)  # by its type: a class's own attribute is another thing
    except Exception as exc:
        raise Incomparable(f"{where or 'the set'} is a {type(value).__name__}, which compares by identity and has "
                           f"no content to compare ({str(exc)[:120]}); {COMPARABLE}") from None
    if isinstance(reduced, str):  # a module-level name pickled by reference: the same one, or not
        return reduced
    parts = list(reduced) + [None] * (5 - len(reduced))
    state = parts[2]
    if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
        state = {**(state[0] or {}), **(state[1] or {})}  # (__dict__, __slots__ values)
    if (isinstance(state, dict) and parts[0] is copyreg.__newobj__ and parts[1] == (type(value),)
            and parts[3] is None and parts[4] is None):  # the default pickling: the attributes are all of it
        return {str(k): v for k, v in state.items()}
    # the items of a list or dict subclass come as iterators: listed, to be compared
    return (parts[0], parts[1], state, list(parts[3] or ()), list(parts[4] or ()))


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _error(exc: BaseException) -> str:
    return user_frame(exc)
