"""`coevolve tasks`: the registered tasks, with their splits and sizes."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tasks", help="list tasks with their splits and sizes", description=__doc__)
    p.set_defaults(handler=handle)


def describe(name: str) -> list[str]:
    from tasks.registry import heuristic_task, kind

    if kind(name) == "agent":
        return [f"{name}  (agent task: multi-turn environment)"]
    task = heuristic_task(name)
    split, size = task.train
    lines = [f"{name}  {task.function_name}()  {task.direction}imise  train on {split} {size}"]
    for split_name, sizes in task.splits().items():
        lines.append(f"    {split_name:<6} {', '.join(map(str, sizes))}")
    return lines


def handle(args: argparse.Namespace) -> int:
    from tasks.registry import list_tasks

    for name in list_tasks():
        print("\n".join(describe(name)))
    return 0
