"""Task registry: name -> "module:attribute". Adding a task = adding a module
and one line here; modules are imported lazily so listing tasks is cheap."""

from __future__ import annotations

import importlib
from typing import Any

TASKS: dict[str, str] = {
    # heuristic design
    "tsp_construct": "tasks.tsp_construct:TSPConstruct",
    "kp_construct": "tasks.kp_construct:KPConstruct",
    "asp": "tasks.asp:AdmissibleSets",
    "tsp_aco": "tasks.tsp_aco:TSPACO",
    "cvrp_aco": "tasks.cvrp_aco:CVRPACO",
    "bpp_aco": "tasks.bpp_aco:BPPACO",
    # agent tasks (multi-turn environments, tasks.base.AgentTask)
    "sudoku": "tasks.sudoku:Sudoku",
    "sudoku9": "tasks.sudoku:sudoku9",
    "react_math": "tasks.react_math:ReactMath",
}


# multi-turn environments (tasks.base.AgentTask): `coevolve run` hands these to
# coevolve.agents instead of the heuristic search loop
AGENT_TASKS = frozenset({"sudoku", "sudoku9", "react_math"})


def is_agent_task(name: str) -> bool:
    return name in AGENT_TASKS


def get_task(name: str) -> Any:
    try:
        target = TASKS[name]
    except KeyError:
        known = ", ".join(sorted(TASKS)) or "none"
        raise KeyError(f"unknown task {name!r} (known: {known})") from None
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)()


def list_tasks() -> list[str]:
    return sorted(TASKS)
