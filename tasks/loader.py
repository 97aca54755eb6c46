"""Task specs: how a user names a task that is not compiled into coevolve.

A spec is one of
- a built-in name (tasks/registry.py's tables: "tsp_construct"),
- a plugin name: an entry point of the `coevolve.tasks` group, the way
  pytest and lm-eval find plugins (`name = "pkg.module:ClassName"` in the
  plugin's pyproject.toml under [project.entry-points."coevolve.tasks"]),
- a file, "path/to/problem.py" (its one task class) or "path/to/problem.py:ClassName",
- a module, "package.module:ClassName" (importable from sys.path).

tasks.registry's lookups (`kind`, `heuristic_task`, `agent_task`) call
`resolve` for every name their tables do not hold, so every command and the
sandbox worker accept the same specs. A resolved task carries its canonical
spec (`SPEC_ATTRIBUTE`: absolute file path and class) so the sandbox sends a
worker that string and the worker loads the same class the same way.

Every bad spec is a TaskSpecError (a UsageError: one line, exit status 2)
naming the file, class or entry point and what was expected.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from coevolve.base.durable import atomic_write_json, atomic_write_text
from coevolve.base.errors import UsageError

Kind = Literal["heuristic", "agent"]
ENTRY_POINT_GROUP = "coevolve.tasks"
SPEC_ATTRIBUTE = "__coevolve_spec__"

# What each kind of task must define (tasks/base.py's protocols); `reference`
# may return None, but the method must exist (the loop and eval ask it).
HEURISTIC_METHODS = ("splits", "instances", "decide", "score", "instance_seconds", "reference")
AGENT_METHODS = ("cases", "reset", "step", "max_turns", "reward", "metrics")


class TaskSpecError(UsageError):
    """A task spec that does not name a loadable task; the message names the file, class or entry point."""


class TaskExited(BaseException):
    """The task's own code, run in this process (`guarded`), tried to end it: sys.exit() or `raise
    SystemExit`, os._exit(), or a KeyboardInterrupt it raised itself (no Ctrl-C or kill came). A
    BaseException like what it replaces, so that the checks' `except Exception` (a call that raised)
    let it through to the caller that writes its one line (`exited`). `how` is what the code did
    ("sys.exit(3)"); `original` the exception it raised, whose traceback holds the user's line; `what`
    the call `guarded` was given, for a caller far from it (the CLI's own catch) to name."""

    def __init__(self, how: str, original: BaseException, what: str = "") -> None:
        super().__init__(how)
        self.how, self.original, self.what = how, original, what


class _OsExit(SystemExit):
    """What os._exit() raises instead of ending the process in a thread `guarded` holds."""


# os._exit, replaced while any thread of this process is `guarded` (one replacement, counted per thread:
# threads that guard at once, a sandbox pool's, must not restore each other's). {thread id: depth}.
_exit_lock = threading.Lock()
_guarded_threads: dict[int, int] = {}
_exit_owner: list[Any] = []  # [pid, the os._exit replaced] while replaced


def _intercepted_exit(status: int) -> None:
    pid, replaced = _exit_owner[0], _exit_owner[1]
    if os.getpid() == pid and threading.get_ident() in _guarded_threads:
        raise _OsExit(status)
    replaced(status)  # a forked child (a sandbox, a pool) or an unguarded thread: its exit is its own


def _hold_exit() -> None:
    with _exit_lock:
        if not _guarded_threads:
            _exit_owner[:] = [os.getpid(), os._exit]
            os._exit = _intercepted_exit
        thread = threading.get_ident()
        _guarded_threads[thread] = _guarded_threads.get(thread, 0) + 1


def _release_exit() -> None:
    with _exit_lock:
        thread = threading.get_ident()
        _guarded_threads[thread] -= 1
        if not _guarded_threads[thread]:
            del _guarded_threads[thread]
        if not _guarded_threads:
            os._exit = _exit_owner[1]


@contextlib.contextmanager
def guarded(what: str = "") -> Iterator[None]:
    """Run the block, the task's own (trusted) code called in this process, so that an exit it
    attempts becomes TaskExited instead of ending the command with the task's status and no word:
    SystemExit (sys.exit), os._exit (which no `except` sees: os._exit is replaced while the block runs,
    and raises only in this process and thread, so a child forked inside it or another thread still
    exits; code that bound `from os import _exit` before is not reached), and a KeyboardInterrupt
    raised by the code itself. A real Ctrl-C or kill (the CLI turns SIGTERM into a KeyboardInterrupt)
    still interrupts: their handlers are wrapped for the block to note that a signal came, since a
    traceback cannot tell the two apart (a signal's KeyboardInterrupt is raised on whatever line was
    running, the task's included). Outside the main thread no signal raises one, so every
    KeyboardInterrupt there is the code's. Blocks nest (the innermost converts). `what`, the call made
    (`exited`'s), travels with the TaskExited: a caller that lets it pass to the CLI (`coevolve.cli`
    prints it, exit status 2) still has the line name the call."""
    signals: list[int] = []
    wrapped: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if callable(handler):  # SIG_IGN or SIG_DFL raise nothing in Python: nothing to tell apart

                def noted(number: int, frame: Any, handler: Any = handler) -> Any:
                    signals.append(number)
                    return handler(number, frame)

                wrapped[signum] = handler
                signal.signal(signum, noted)
    _hold_exit()
    try:
        yield
    except SystemExit as exc:
        code = exc.code
        how = f"os._exit({code!r})" if isinstance(exc, _OsExit) else \
            f"{'SystemExit' if _raised_by_name(exc) else 'sys.exit'}({'' if code is None else repr(code)})"
        raise TaskExited(how, exc, what) from None
    except KeyboardInterrupt as exc:
        if signals:
            raise  # Ctrl-C or a kill: the command stops as it always does (the resume line)
        raise TaskExited("KeyboardInterrupt raised by the task's code, not a Ctrl-C", exc, what) from None
    finally:
        _release_exit()
        for signum, handler in wrapped.items():
            signal.signal(signum, handler)


def _raised_by_name(exc: SystemExit) -> bool:
    """Whether the user's line that ended with `exc` reads `raise SystemExit...` rather than sys.exit()."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = user_frame_index(frames)
    return at is not None and "SystemExit" in (frames[at].line or "")


def exited(exc: TaskExited, what: str = "", code: str = "a task's code") -> str:
    """The one line for a task's code that tried to end the process: the method the framework called
    (the outermost frame of the user's code; "importing it" at a file's top level), what it did, the
    line it did it on (with the function that line is in when it is another) and `what` was being
    done (a check's stage), where it says more: `score() exited the process (sys.exit(3)) at
    /me/task.py:104, during the template's decide() and score() on train 50: a task's code must
    return a value or raise an exception, not exit`. Without `what`, the one `guarded` was given; `code` says
    whose code it is (check-method's hooks: "a method's code")."""
    what = what or exc.what
    frames = traceback.extract_tb(exc.original.__traceback__)
    at = user_frame_index(frames)
    rule = f"{code} must return a value or raise an exception, not exit"
    if at is None:
        return f"{what or 'the task'} exited the process ({exc.how}): {rule}"
    first = next(i for i in range(len(frames)) if _is_user(frames[i].filename))
    called = "importing it" if frames[first].name == "<module>" else f"{frames[first].name}()"
    inner = frames[at].name
    within = "" if inner in (frames[first].name, "<module>") or inner.startswith("<") else f" (in {inner})"
    during = f", during {what}" if what and what != called else ""
    return f"{called} exited the process ({exc.how}) at {frames[at].filename}:{frames[at].lineno}{within}{during}: {rule}"


@dataclass(frozen=True)
class Resolved:
    """A loaded spec: how to build the task and what it is."""

    spec: str  # canonical: "/abs/problem.py:Class", "pkg.mod:Class" or the plugin's name
    kind: Kind
    factory: Callable[..., Any]
    path: Path | None  # the source file of a file spec
    origin: str  # "file", "module" or "plugin"

    def build(self, **options: Any) -> Any:
        try:
            with guarded():
                task = self.factory(**options)
        except UsageError:
            raise
        except TypeError:
            raise  # an option the factory does not take: the caller names it
        except Exception as exc:
            raise TaskSpecError(f"{self.spec}: building the task failed: {user_frame(exc)}") from None
        except TaskExited as exc:
            raise TaskSpecError(f"{self.spec}: building the task: {exited(exc, '__init__()')}") from None
        try:
            setattr(task, SPEC_ATTRIBUTE, self.spec)
        except (AttributeError, TypeError):
            pass  # a task with __slots__ travels by its class instead
        return task


def looks_like_spec(name: str) -> bool:
    """A file or module:attribute spec rather than a registry name."""
    return _split_file(name) is not None or (":" in name and os.sep not in name)


def _split_file(spec: str) -> tuple[str, str | None] | None:
    """(path, class or None) when `spec` names a .py file."""
    if spec.endswith(".py"):
        return spec, None
    path, colon, attr = spec.rpartition(":")
    if colon and path.endswith(".py") and attr.isidentifier():
        return path, attr
    return None


_cache: dict[str, Resolved] = {}
_entry_points: tuple[Any, ...] | None = None  # the coevolve.tasks group, scanned once per process
# {(what, original path): the note saying so}: files read from the run's copy in this process
# (locate_files: gone since the run, or changed and on_change="copy"), for the command that read them to
# say so (copy_notes); kept here because those reads happen deep in report's and eval's machinery.
_copy_notes: dict[tuple[str, str], str] = {}


def clear_cache() -> None:
    """Forget resolved specs, the scanned entry points and the changed files read from a run's
    copy (tests that install or remove a plugin, or edit a task file, call it; a fresh process
    starts clear)."""
    global _entry_points
    _cache.clear()
    _entry_points = None
    _copy_notes.clear()


def resolve(spec: str) -> Resolved:
    """The task a file, module or plugin spec names; TaskSpecError when it
    names none, KeyError-free. Registry names are tasks.registry's business."""
    if spec in _cache:
        return _cache[spec]
    plugin = plugins().get(spec)
    if plugin is not None:
        resolved = _from_plugin(spec, plugin)
    elif (file_spec := _split_file(spec)) is not None:
        resolved = _from_file(*file_spec)
    elif ":" in spec:
        resolved = _from_module(spec)
    else:
        raise TaskSpecError(f"unknown task {spec!r}")
    _cache[spec] = _cache[resolved.spec] = resolved
    return resolved


# -- files -----------------------------------------------------------------------
def module_name(path: Path) -> str:
    """The sys.modules name of a task file: stable per absolute path, never a real package's."""
    return "coevolve_task_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]


def _from_file(path_text: str, class_name: str | None) -> Resolved:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise TaskSpecError(f"task file not found: {path_text}")
    module = load_file(path)
    found = task_classes(module)
    if class_name is not None:
        target = getattr(module, class_name, None)
        if target is None:
            raise TaskSpecError(f"{path_text}: no class {class_name!r} "
                                f"(task classes in the file: {', '.join(found) or 'none'})")
    elif len(found) == 1:
        class_name, target = next(iter(found.items()))
    elif not found:
        others = [n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__]
        raise TaskSpecError(f"{path_text}: no task class (a class with decide() and score(), or an agent task "
                            f"with reset() and step()); classes found: {', '.join(others) or 'none'}")
    else:
        raise TaskSpecError(f"{path_text} defines {len(found)} task classes ({', '.join(found)}): "
                            f"name one, e.g. {path_text}:{next(iter(found))}")
    spec = f"{path}:{class_name}"
    return Resolved(spec, _kind_of(target, spec), target, path, "file")


def load_file(path: Path) -> Any:
    """Import the task file `path` once per process, under module_name(path).
    Its folder joins sys.path (at the end) so it may import files next to it."""
    name = module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskSpecError(f"{path}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it runs
    try:
        with guarded():
            spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if isinstance(exc, TaskExited):
            raise TaskSpecError(f"{path}: {exited(exc, 'importing it')}") from None
        if not isinstance(exc, Exception):  # interrupts pass: Ctrl-C, check-task's time limit
            raise
        raise TaskSpecError(f"{path}: importing it failed: {user_frame(exc)}") from None
    return module


def task_classes(module: Any) -> dict[str, type]:
    """The classes defined in `module` (not imported into it) that look like a
    task of either kind: a heuristic task's decide/score/template, or an
    agent task's reset/step. Only the shape: `check_shape` names what is missing."""
    marks = {"decide", "score", "template", "function_name", "reset", "step"}
    return {name: value for name, value in vars(module).items()
            if inspect.isclass(value) and value.__module__ == module.__name__
            and not name.startswith("_") and len(marks & set(dir(value))) >= 2}


# -- modules and plugins -----------------------------------------------------------
def _from_module(spec: str) -> Resolved:
    module_path, _, attr = spec.partition(":")
    if not all(part.isidentifier() for part in module_path.split(".")) or not attr:
        raise TaskSpecError(f"task {spec!r}: expected a task name, path/to/file.py[:Class] or package.module:Class")
    target = _import_attribute(module_path, attr, spec)
    return Resolved(spec, _kind_of(target, spec), target, None, "module")


def _import_attribute(module_path: str, attr: str, what: str) -> Any:
    try:
        module = importlib.import_module(module_path)
    except Exception as exc:
        raise TaskSpecError(f"{what}: cannot import {module_path}: {user_frame(exc)}") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise TaskSpecError(f"{what}: module {module_path} has no {attr!r}")
    return target


def plugins() -> dict[str, Any]:
    """Entry points of the `coevolve.tasks` group by name. Two that claim one
    name, or one that claims a built-in name, is a TaskSpecError when looked
    up or listed (raised by `plugin_conflicts`)."""
    found: dict[str, Any] = {}
    for entry in _group():
        found.setdefault(entry.name, entry)
    return found


def _group() -> tuple[Any, ...]:
    """The entry points of the `coevolve.tasks` group: scanning every
    installed distribution costs milliseconds per lookup, and lookups happen
    per task name, so the scan is kept for the process (`clear_cache` drops it)."""
    global _entry_points
    if _entry_points is None:
        _entry_points = tuple(entry_points(group=ENTRY_POINT_GROUP))
    return _entry_points


def plugin_conflicts(builtin: set[str]) -> list[str]:
    """One line per task name claimed twice (by two plugins, or by a plugin and a built-in task)."""
    by_name: dict[str, list[str]] = {}
    for entry in _group():
        dist = getattr(getattr(entry, "dist", None), "name", None) or "?"
        by_name.setdefault(entry.name, []).append(f"{entry.value} (from {dist})")
    lines = []
    for name, claims in sorted(by_name.items()):
        claims = sorted(set(claims))
        if name in builtin:
            claims = ["the built-in task"] + claims
        if len(claims) > 1:
            lines.append(f"task name {name!r} is registered twice: by {' and by '.join(claims)}")
    return lines


def _from_plugin(name: str, entry: Any) -> Resolved:
    from tasks.registry import AGENT_TASKS, HEURISTIC_TASKS  # here: the registry imports this module (a cycle)

    for line in plugin_conflicts(set(HEURISTIC_TASKS) | set(AGENT_TASKS)):
        if f"task name {name!r}" in line:
            raise TaskSpecError(line)
    module_path, _, attr = entry.value.partition(":")
    target = _import_attribute(module_path, attr or "", f"plugin task {name!r} (entry point {entry.value})")
    return Resolved(name, _kind_of(target, f"plugin task {name!r}"), target, None, "plugin")


# -- checks --------------------------------------------------------------------------
def _kind_of(target: Any, what: str) -> Kind:
    """The task kind a class (or factory's return annotation) has, from its methods."""
    if not callable(target):
        raise TaskSpecError(f"{what}: is a {type(target).__name__}, expected a task class or factory")
    probe = target if inspect.isclass(target) else None
    if probe is None:
        return "agent" if _agent_like(target) else "heuristic"
    if _agent_like(probe) and not hasattr(probe, "decide"):
        # only methods: an agent task may set its attributes in __init__
        missing = [m + "()" for m in AGENT_METHODS if not callable(getattr(probe, m, None))]
        if missing:
            raise TaskSpecError(f"{what}: agent task class lacks {', '.join(missing)} (see tasks/base.py AgentTask)")
        return "agent"
    missing_methods = [m for m in HEURISTIC_METHODS if not callable(getattr(probe, m, None))]
    if missing_methods:
        hint = " (return None when there is none)" if missing_methods == ["reference"] else ""
        raise TaskSpecError(f"{what}: task class lacks {', '.join(m + '()' for m in missing_methods)}{hint} "
                            "(a heuristic task needs " + ", ".join(m + "()" for m in HEURISTIC_METHODS) + ")")
    return "heuristic"


def _agent_like(target: Any) -> bool:
    return hasattr(target, "reset") and hasattr(target, "step")


def user_frame_index(frames: traceback.StackSummary) -> int | None:
    """Where in `frames` (traceback.extract_tb's) the deepest frame of the user's code is: outside
    coevolve, the standard library and installed packages; None when there is none."""
    return next((i for i in reversed(range(len(frames))) if _is_user(frames[i].filename)), None)


_ROOT = Path(__file__).resolve().parents[1]
_OURS = tuple(str(_ROOT / package) + os.sep for package in ("coevolve", "tasks")) + (os.path.dirname(os.__file__),)


def _is_user(filename: str) -> bool:
    """Whether a frame's file is the user's: outside coevolve, the standard library and installed packages
    (a compiled extension's frame names its source relative to its package, numpy/random/_generator.pyx:
    not a file of the user's, whose are absolute; code with no file, <string>, counts as theirs)."""
    compiled = os.sep in filename and not os.path.isabs(filename)
    return (not filename.startswith(_OURS) and "<frozen" not in filename and "site-packages" not in filename
            and not compiled)


def user_frame(exc: BaseException) -> str:
    """`Type: message` of an exception raised while importing or calling a
    user's task, with the deepest frame outside coevolve and the standard
    library (file:line), so the error names the user's line."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"SyntaxError at {exc.filename}:{exc.lineno}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    at = user_frame_index(frames)
    where = f" (at {frames[at].filename}:{frames[at].lineno})" if at is not None else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{where}"


def raised_in(exc: BaseException, called: str) -> str:
    """`Type: message (at file:line)` of what the task's `called` method raised (user_frame),
    with the function that line is in when it is another one (score() calling instance_scores(), a
    helper): `KeyError: 27 (at /me/task.py:99, in instance_scores)`."""
    text = user_frame(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    at = user_frame_index(frames)  # the frame user_frame named
    if at is None or isinstance(exc, SyntaxError) and exc.filename:  # named by its file, not a frame
        return text
    while frames[at].name.startswith("<") and at > 0 and frames[at - 1].filename == frames[at].filename:
        at -= 1  # a comprehension or a lambda: the function it is written in
    name = frames[at].name
    return text if name in (called.removesuffix("()"), "<module>") else f"{text[:-1]}, in {name})"


def task_label(spec: str) -> str:
    """A short, path-free name for a spec (run directory names): a file or
    module task's class attribute `name` when it has one, else the file's
    stem or the class name; a registry name as it is."""
    file_spec = _split_file(spec)
    if file_spec is None and ":" not in spec:
        return spec
    name = getattr(resolve(spec).factory, "name", None)
    if isinstance(name, str) and name and "/" not in name:
        return name
    return Path(file_spec[0]).stem if file_spec else spec.rpartition(":")[2]


def source_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- runs that remember their task -------------------------------------------------
# A run (or comparison) directory records every file task it uses in
# tasks.json, {spec: {path, class, sha256, copy}}, with a copy of the source
# under task_files/. A fresh process re-finds the task from the directory alone.
# A method file (coevolve.search.methods) is kept the same way, in its own
# record (methods.json, method_files/): record_files and locate_files serve both.
RECORD = "tasks.json"
COPIES = "task_files"


def absolute_spec(spec: str, base: str | Path = ".") -> str:
    """A file spec made absolute (relative paths count from `base`: the
    folder of the TOML that names it, or the working directory for a flag) and
    canonical (the class named); other specs as they are."""
    file_spec = _split_file(spec)
    if file_spec is None:
        return spec
    path, cls = file_spec
    full = Path(base, path).expanduser()
    if not full.is_file():
        where = "" if Path(path).is_absolute() else f" (looked in {Path(base).resolve()})"
        raise TaskSpecError(f"task file not found: {path}{where}")
    return resolve(f"{full.resolve()}:{cls}" if cls else str(full.resolve())).spec


def record_files(directory: str | Path, specs: list[str], record: str, copies: str) -> None:
    """Record the file specs among `specs` in `directory`: a copy of each source under `copies`/ and its
    path, class and sha256 in the JSON file `record`. A spec recorded already keeps its first copy."""
    directory = Path(directory)
    entries = read_record(directory, record)
    for spec in specs:
        file_spec = _split_file(spec)
        if file_spec is None or spec in entries:
            continue
        path = Path(file_spec[0])
        digest = source_sha256(path)
        copy = Path(copies) / f"{path.stem}-{digest[:12]}.py"
        atomic_write_text(directory / copy, path.read_text(encoding="utf-8"))
        entries[spec] = {"path": str(path), "class": file_spec[1], "sha256": digest, "copy": str(copy)}
    if entries:
        atomic_write_json(directory / record, entries)


def record_tasks(directory: str | Path, specs: list[str]) -> None:
    """Record the file tasks among `specs` in `directory` (a copy of each source and its sha256)."""
    record_files(directory, specs, RECORD, COPIES)


def read_record(directory: str | Path, record: str = RECORD) -> dict[str, dict]:
    path = Path(directory) / record
    if not path.exists():
        return {}
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TaskSpecError(f"{path}: unreadable ({exc})") from None
    if not isinstance(entries, dict):
        raise TaskSpecError(f"{path}: expected a JSON object")
    return entries


def copy_notes() -> list[str]:
    """One line per file read from the run's copy instead of its original since the last call
    (locate_files): `task file X changed since the run; using the run's copy (DIR/task_files/...)`, or
    `task file X is gone; using the run's copy (...)`. `coevolve eval --run`, `coevolve report` and
    `coevolve run --resume` (its --plan too) print them: a user is told which source was read."""
    notes = list(_copy_notes.values())
    _copy_notes.clear()
    return notes


def locate_files(directory: str | Path, record: str, what: str,
                 on_change: Literal["refuse", "accept", "copy"] = "refuse",
                 flag: str | None = None, owner: str = "run") -> tuple[dict[str, str], list[dict]]:
    """Where each file spec recorded in `directory`'s `record` is read from in this process: the
    original file when it is unchanged, the run's copy when the original is gone (noted for copy_notes,
    whatever `on_change`). A changed original is a TaskSpecError (`refuse`, naming `flag` as the way
    on), the edited file (`accept`), or the run's copy (`copy`: what report and eval read, the source
    the run used; noted for copy_notes).
    `owner`: what `directory` holds, as the refusal names it ("run", "comparison").
    Returns {spec: spec to load} and one `{what}_changed` event per accepted change, for the caller
    to log."""
    directory = Path(directory)
    targets, changed = {}, []
    for spec, entry in read_record(directory, record).items():
        path, copy = Path(entry["path"]), directory / entry["copy"]
        cls = entry.get("class")
        from_copy = f"{copy.resolve()}:{cls}" if cls else str(copy.resolve())
        if path.is_file() and source_sha256(path) == entry["sha256"]:
            target = spec
        elif path.is_file() and on_change != "copy":
            digest = source_sha256(path)
            if on_change == "refuse":
                way_on = (f" or pass {flag} to go on with the edited file (recorded in the run's events)" if flag
                          else f", or {'compare' if owner == 'comparison' else 'run'} the edited file in a new "
                               f"{owner} (another --out)")
                raise TaskSpecError(f"{what} file {path} changed since the {owner} started (sha256 "
                                    f"{entry['sha256'][:12]} -> {digest[:12]}); restore it (the {owner}'s copy: {copy})"
                                    f"{way_on}")
            target = spec
            changed.append({"type": f"{what}_changed", "path": str(path), "recorded_sha256": entry["sha256"],
                            "sha256": digest})
        elif copy.is_file():  # changed (on_change == "copy") or gone: the caller's command says so
            target = from_copy
            why = "changed since the run" if path.is_file() else "is gone"
            _copy_notes.setdefault((what, str(path)), f"{what} file {path} {why}; using the run's copy ({copy})")
        else:
            raise TaskSpecError(f"{what} file {path} is gone and the run's copy {copy} too")
        targets[spec] = target
    return targets, changed


def remember_tasks(directory: str | Path, on_change: Literal["refuse", "accept", "copy"] = "refuse",
                   flag: str | None = None, owner: str = "run") -> list[dict]:
    """Make the file tasks recorded in `directory` resolvable by their recorded
    specs in this process (locate_files: the original, or the run's copy).
    Returns one `task_changed` event per accepted change, for the caller to log."""
    targets, changed = locate_files(directory, RECORD, "task", on_change, flag, owner)
    for spec, target in targets.items():
        _cache[spec] = resolve(target)
    return changed
