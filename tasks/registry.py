"""One registry per task kind, with typed lookups.

Heuristic-design tasks (tasks.base.HeuristicTask: a template program and an
evaluator) and agent tasks (tasks.base.AgentTask: a multi-turn environment)
are looked up separately, so a caller never probes a task object to learn its
kind. Adding a task = one module + one line in the table of its kind. Targets
are "module:attribute" strings imported on first use (listing tasks stays
cheap), or the factory itself (tests call `register_*`).

A name the tables do not hold is a task spec (tasks.loader): an installed
plugin (entry-point group `coevolve.tasks`), `path/to/problem.py[:Class]` or
`package.module:Class`. Every lookup below accepts them, so the commands and
the sandbox worker take a user's task wherever they take a built-in one.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from coevolve.base.errors import UsageError, did_you_mean
from tasks.base import AgentTask, HeuristicTask
from tasks.loader import TaskSpecError, looks_like_spec, plugin_conflicts, plugins, resolve

Kind = Literal["heuristic", "agent"]
Target = str | Callable[..., Any]


@dataclass(frozen=True)
class AgentEntry:
    """An agent task's factory; `python_tool`: the factory takes `tool=`, a
    sandboxed Python runner the caller supplies (tasks never build sandboxes)."""

    target: Target
    python_tool: bool = False


HEURISTIC_TASKS: dict[str, Target] = {
    "tsp_construct": "tasks.tsp_construct:TSPConstruct",
    "kp_construct": "tasks.kp_construct:KPConstruct",
    "asp": "tasks.asp:AdmissibleSets",
    "tsp_aco": "tasks.tsp_aco:TSPACO",
    "cvrp_aco": "tasks.cvrp_aco:CVRPACO",
    "bpp_aco": "tasks.bpp_aco:BPPACO",
}

AGENT_TASKS: dict[str, AgentEntry] = {
    "sudoku": AgentEntry("tasks.sudoku:Sudoku"),
    "sudoku9": AgentEntry("tasks.sudoku:sudoku9"),
    "react_math": AgentEntry("tasks.react_math:ReactMath", python_tool=True),
}


_UNSET: Any = object()


class TaskOptionError(ValueError):
    """A bad option of an agent task: one its factory does not take, or a value it refuses. A task's
    factory raises it for its own bounds, `TaskOptionError("masked", "must be in 1..15", masked)`, so a
    run config names the key (`config error: task.masked must be in 1..15 (got -1)`) and check-task the
    flag (`--option masked: ...`). `problem` is what the option must be, with the value and hint added."""

    def __init__(self, option: str, problem: str, value: Any = _UNSET, hint: str = "") -> None:
        problem = f"{problem}{'' if value is _UNSET else f' (got {value!r})'}{hint}"
        super().__init__(f"task.{option} {problem}")
        self.option, self.problem = option, problem

    def __reduce__(self) -> tuple:  # the task may be built in a worker process: the error crosses back whole
        return type(self), (self.option, self.problem)


class UnknownTask(UsageError, KeyError):
    """A task name that no registry (of the asked kind) holds; the message lists the known ones. A
    UsageError, so a command that does not name the field itself still prints one line."""

    def __str__(self) -> str:
        return str(self.args[0])


def register_heuristic(name: str, target: Target) -> None:
    _check_new(name)
    HEURISTIC_TASKS[name] = target


def register_agent(name: str, target: Target, python_tool: bool = False) -> None:
    _check_new(name)
    AGENT_TASKS[name] = AgentEntry(target, python_tool)


def unregister(name: str) -> None:
    HEURISTIC_TASKS.pop(name, None)
    AGENT_TASKS.pop(name, None)


def kind(name: str) -> Kind:
    if name in HEURISTIC_TASKS:
        return "heuristic"
    if name in AGENT_TASKS:
        return "agent"
    return _from_spec(name, list_tasks()).kind


def is_agent_task(name: str) -> bool:
    if name in AGENT_TASKS or name in HEURISTIC_TASKS:
        return name in AGENT_TASKS
    try:
        return kind(name) == "agent"
    except UnknownTask:
        return False


def folder_hint(name: str) -> str:
    """"; X is a folder: ..." when `name` is a folder holding Python files (`coevolve new-task X` makes
    X/problem.py, and a newcomer names the folder), else ""."""
    folder = Path(name)
    if not folder.is_dir():
        return ""
    files = sorted(p.name for p in folder.glob("*.py") if not p.name.startswith("test_"))
    if not files:
        return f"; {name} is a folder with no task file in it: give the task's .py file"
    first = next((f for f in ("problem.py", "env.py") if f in files), files[0])
    return f"; {name} is a folder: give its task file, e.g. {folder / first}"


def unknown_name(name: str) -> str | None:
    """What to say of a plain task name no registry or plugin holds, of either kind (before a run's
    kind is chosen by its task); None for a known name or a file/module spec."""
    if name in AGENT_TASKS or name in HEURISTIC_TASKS or looks_like_spec(name) or name in plugins():
        return None
    return (f"unknown task {name!r} (heuristic design: {', '.join(sorted(HEURISTIC_TASKS))}; agent: "
            f"{', '.join(sorted(AGENT_TASKS))}; or path/to/problem.py, path/to/env.py, package.module:Class)"
            f"{folder_hint(name) or did_you_mean(name, [*HEURISTIC_TASKS, *AGENT_TASKS])}")


def heuristic_task(name: str) -> HeuristicTask:
    if name in HEURISTIC_TASKS:
        return _resolve(HEURISTIC_TASKS[name])()
    known = f"heuristic tasks: {', '.join(sorted(HEURISTIC_TASKS))}"
    if name in AGENT_TASKS:
        raise UnknownTask(f"{name!r} is an agent task, not a heuristic-design task ({known})")
    resolved = _from_spec(name, sorted(HEURISTIC_TASKS))
    if resolved.kind != "heuristic":
        raise UnknownTask(f"{name!r} is an agent task, not a heuristic-design task ({known})")
    return resolved.build()


def agent_task(name: str, options: Mapping[str, Any] | None = None, tool: Callable | None = None) -> AgentTask:
    """The environment `name`, built with `options` (the run config's [task]
    table) as keyword arguments; an option the factory does not take, or of
    another type than its default, is a TaskOptionError naming it (as is a
    value the factory refuses with one). `tool` goes to tasks that run Python."""
    factory, build, python_tool = _agent_factory(name)
    kwargs = dict(options or {})
    accepted = _keywords(factory)
    for key in kwargs:
        if accepted is not None and key not in accepted:
            known = sorted(k for k in accepted if k != "tool")
            raise TaskOptionError(key, f"is not an option of {name} (its options: {', '.join(known) or 'none'})",
                                  hint=did_you_mean(key, known))
    _check_option_types(factory, kwargs)
    if python_tool and tool is not None:
        kwargs["tool"] = tool
    return build(**kwargs)


def _agent_factory(name: str) -> tuple[Callable[..., Any], Callable[..., Any], bool]:
    """(the factory whose keywords are the task's options, what builds it, whether it takes the Python tool)."""
    known = f"agent tasks: {', '.join(sorted(AGENT_TASKS))}"
    if name in HEURISTIC_TASKS:
        raise UnknownTask(f"{name!r} is a heuristic-design task, not an agent task ({known})")
    if name in AGENT_TASKS:
        factory = _resolve(AGENT_TASKS[name].target)
        return factory, factory, AGENT_TASKS[name].python_tool
    resolved = _from_spec(name, sorted(AGENT_TASKS))
    if resolved.kind != "agent":
        raise UnknownTask(f"{name!r} is a heuristic-design task, not an agent task ({known})")
    # a user's agent task gets the Python tool when its constructor takes `tool`
    return resolved.factory, resolved.build, "tool" in (_keywords(resolved.factory) or ())


def path_options(name: str) -> tuple[str, ...]:
    """The options of agent task `name` that name files (a parameter annotated with `Path`, as react_math's
    `problems_file`): a config counts them from its TOML's folder, as its other paths. () for a heuristic
    task, or one that cannot be resolved here (its own error comes when the run is checked)."""
    try:
        params = inspect.signature(_agent_factory(name)[0]).parameters.values()
    except Exception:  # an unknown name, a broken file: said, with its line, by the checks that build it
        return ()
    return tuple(p.name for p in params if "Path" in str(p.annotation))


def get_task(name: str) -> HeuristicTask | AgentTask:
    """Either kind, by name (the sandbox worker and `coevolve tasks` list both)."""
    return agent_task(name) if kind(name) == "agent" else heuristic_task(name)


def list_tasks(of_kind: Kind | None = None) -> list[str]:
    """Built-in task names (of a kind); `plugin_tasks` lists the installed plugins."""
    if of_kind == "heuristic":
        return sorted(HEURISTIC_TASKS)
    if of_kind == "agent":
        return sorted(AGENT_TASKS)
    return sorted({**HEURISTIC_TASKS, **AGENT_TASKS})


def plugin_tasks() -> list[str]:
    """Names of the installed plugin tasks (entry-point group coevolve.tasks);
    a TaskSpecError when two claim one name (or a plugin claims a built-in's)."""
    conflicts = plugin_conflicts(set(HEURISTIC_TASKS) | set(AGENT_TASKS))
    if conflicts:
        raise TaskSpecError(conflicts[0])
    return sorted(plugins())


def _from_spec(name: str, known: list[str]) -> Any:
    """tasks.loader's resolution of a name the tables do not hold; a plain
    name that is no plugin either is UnknownTask listing the known ones."""
    if not looks_like_spec(name) and name not in plugins():
        raise UnknownTask(f"unknown task {name!r} (known: {', '.join(known) or 'none'}; "
                          f"or path/to/problem.py, package.module:Class){folder_hint(name) or did_you_mean(name, known)}")
    return resolve(name)


def _check_new(name: str) -> None:
    if name in HEURISTIC_TASKS or name in AGENT_TASKS:
        raise ValueError(f"task {name!r} is already registered")


def _resolve(target: Target) -> Callable[..., Any]:
    if callable(target):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


# what an option's value must be, by the type of the constructor's default for it
OPTION_TYPES = {bool: ("true or false", (bool,)), int: ("an integer", (int,)), float: ("a number", (int, float)),
                str: ("a string", (str,))}


def _check_option_types(factory: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """An option of another type than its default (`masked = "abc"` where the default is 4) is a
    TaskOptionError naming it, not whatever the constructor raises when it first uses the value.
    Options without a default, or defaulting to None, go through as given."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    for key, value in options.items():
        default = params[key].default if key in params else None
        expected = OPTION_TYPES.get(type(default))
        if expected is None:
            continue
        what, allowed = expected
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise TaskOptionError(key, f"must be {what}, as its default {default!r} is (got {value!r})")


def _keywords(factory: Callable[..., Any]) -> set[str] | None:
    """The keyword arguments `factory` accepts; None when it takes any (**kwargs)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
