"""The contracts a task fulfils. A heuristic-design task is a template program
plus an evaluator (LLM4AD's split); the search loop and the sandbox know tasks
only through this protocol and the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol, runtime_checkable

Direction = Literal["min", "max"]


class InvalidSolution(Exception):
    """A heuristic produced an infeasible or malformed decision (visited node,
    wrong type, NaN ...). The sandbox turns it into the `invalid` failure."""


@dataclass(frozen=True)
class Reference:
    value: float
    kind: Literal["exact", "best-known", "bound"]
    source: str  # e.g. "LKH-3 via elkai", "dynamic programming", "C(n,w) bound"


@runtime_checkable
class HeuristicTask(Protocol):
    name: str  # registry key, e.g. "tsp_construct"
    description: str  # the problem, in words, for prompts
    function_name: str  # e.g. "select_next_node"
    template: str  # a complete baseline program: imports, signature, docstring, body
    direction: Direction
    train: tuple[str, int]  # (split, size) scored during search, e.g. ("train", 50)

    def splits(self) -> dict[str, list[int]]:
        """split name -> available instance sizes."""

    def instances(self, split: str, size: int) -> Any:
        """Deterministic instance set, regenerated from seeds (cached is fine)."""

    def evaluate(self, fn: Callable[..., Any], instances: Any) -> float:
        """Mean objective of heuristic `fn` over `instances`; raises InvalidSolution."""

    def reference(self, split: str, size: int) -> Reference | None:
        """Reference objective for a set, when computable."""


def gap(objective: float, reference: float, direction: Direction) -> float:
    """Relative distance to the reference, positive when worse (0.05 = 5% worse)."""
    if reference == 0:
        raise ValueError("gap is undefined for a zero reference")
    diff = objective - reference if direction == "min" else reference - objective
    return diff / abs(reference)
