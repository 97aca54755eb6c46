"""`coevolve tasks [SPEC ...]`: every built-in and installed plugin task (entry
points of the `coevolve.tasks` group), with its splits and sizes; SPECs
(path/to/problem.py[:Class], package.module:Class) are described too, after
them."""

from __future__ import annotations

import argparse
import sys

from coevolve.base.errors import UsageError
from tasks.loader import TaskExited, absolute_spec, exited, guarded
from tasks.registry import heuristic_task, kind, list_tasks, plugin_tasks


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tasks", help="list tasks with their splits and sizes", description=__doc__)
    p.add_argument("specs", nargs="*", metavar="SPEC",
                   help="a file or module task to describe too, after the built-in and plugin ones")
    p.set_defaults(handler=handle)


def describe(name: str, origin: str = "") -> list[str]:
    label = f"{name}  [{origin}]" if origin else name
    if kind(name) == "agent":
        return [f"{label}  (agent task: multi-turn environment)"]
    task = heuristic_task(name)
    split, size = task.train
    lines = [f"{label}  {task.function_name}()  {task.direction}imise  train on {split} {size}"]
    with guarded():  # the task's own code, run here: one that exits is one line (coevolve.cli), not a silent end
        splits = task.splits()
    for split_name, sizes in splits.items():
        lines.append(f"    {split_name:<6} {', '.join(map(str, sizes))}")
    return lines


def handle(args: argparse.Namespace) -> int:
    # the SPECs described first: a misspelt one is refused before the list, not under it
    described = [describe(absolute_spec(spec), "file" if ".py" in spec else "module") for spec in args.specs]
    for name in list_tasks():
        print("\n".join(describe(name)))
    broken = 0
    for name in plugin_tasks():
        try:
            print("\n".join(describe(name, "plugin")))
        except (UsageError, TaskExited) as exc:  # one broken plugin does not hide the others
            print(f"coevolve tasks: error: {exited(exc) if isinstance(exc, TaskExited) else exc}", file=sys.stderr)
            broken += 1
    for lines in described:
        print("\n".join(lines))
    return 2 if broken else 0
