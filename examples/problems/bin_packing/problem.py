"""Online bin packing, FunSearch's classic (Romera-Paredes et al., Nature 2024).

Items arrive one at a time and each goes at once into a bin with room for
it, or into a new bin. The evolved function `priority(item, bins)` scores
every bin that can take the item (remaining capacities); the item goes to
the highest-scoring one. A new, empty bin is always among the candidates
(with remaining capacity = CAPACITY), so the heuristic decides when to open
one, as in FunSearch's evaluator.

Instances: item sizes drawn from a Weibull(shape 3, scale 45) distribution,
clipped to [1, 100] and rounded, capacity 100 (FunSearch's Weibull
datasets; smaller sets here so a run's evaluation stays in seconds).
Objective: bins used divided by the L2 lower bound of Martello & Toth
(1990), averaged over the instances of a set; 1.0 would be optimal, lower
is better. The bound is computed per instance, never hard-coded.

Evaluation cascade: each new candidate is scored on one instance first
(split "quick") and on all five only if it is within 2% of the archive's
median; the others stop with the outcome `cascade` (docs/own_problem.md).

Run:   coevolve check-task examples/problems/bin_packing/problem.py
       coevolve run examples/problems/bin_packing/config.toml
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import InvalidSolution, Reference, SeededSets, as_index, call_budget, check_array, draws_of

CAPACITY = 100

TEMPLATE = '''import numpy as np


def priority(item, bins):
    """Score the bins an arriving item may go into; the item goes to the highest score.

    Args:
        item: float, the size of the arriving item (1..100).
        bins: 1-D numpy float array, the remaining capacity of every bin that
            has room for the item; the last entry is a new, empty bin (100.0).

    Returns:
        1-D numpy array of the same length as bins: one score per bin.
    """
    # Baseline: best fit (the tightest bin wins), FunSearch's starting point.
    return -(bins - item)
'''


def weibull_items(rng: np.random.RandomState, count: int, size: int) -> np.ndarray:
    """`count` instances of `size` item sizes, Weibull(3, 45) clipped to [1, CAPACITY] and rounded."""
    return np.clip(np.round(45.0 * rng.weibull(3.0, size=(count, size))), 1, CAPACITY)


def l2_lower_bound(items: np.ndarray, capacity: int = CAPACITY) -> int:
    """Martello & Toth's L2 bound on the bins any packing needs.

    For a threshold k in [0, capacity/2]: items above capacity - k need a
    bin each (J1); items in (capacity/2, capacity - k] need one each too and
    cannot share with each other (J2); items in [k, capacity/2] (J3) fill
    what J2 leaves free, then whole new bins. The bound is the best k."""
    items = np.asarray(items, dtype=float)
    half = capacity / 2
    best = math.ceil(items.sum() / capacity)  # L1, the k = 0 case's floor
    for k in np.unique(np.concatenate([[0.0], items[items <= half]])):
        j1 = items > capacity - k
        j2 = (items > half) & ~j1
        j3 = (items >= k) & (items <= half)
        free = j2.sum() * capacity - items[j2].sum()
        extra = max(0, math.ceil((items[j3].sum() - free) / capacity))
        best = max(best, int(j1.sum() + j2.sum() + extra))
    return best


def bins_used(assignment: np.ndarray, items: np.ndarray) -> int:
    """Checked count of the bins in `assignment` (bin index per item, in arrival order)."""
    assignment = check_array(assignment, "i", (len(items),), "the assignment")
    if len(items) == 0:
        return 0
    if assignment.min() < 0:
        raise InvalidSolution("a bin index is negative")
    loads = np.bincount(assignment, weights=items)
    if (loads > CAPACITY + 1e-9).any():
        over = int(np.flatnonzero(loads > CAPACITY + 1e-9)[0])
        raise InvalidSolution(f"bin {over} holds {loads[over]:g} > capacity {CAPACITY}")
    return int((loads > 0).sum())


class OnlineBinPacking:
    name = "bin_packing_online"
    description = (
        "Online bin packing: items of sizes 1..100 arrive one at a time and each goes at once into a bin of "
        "capacity 100. priority(item, bins) returns a score for each bin that can take the item (bins holds "
        "their remaining capacities; the last one is a new, empty bin); the item goes to the highest score. "
        "Objective: bins used divided by a lower bound, lower is better. Item sizes follow a Weibull distribution."
    )
    function_name = "priority"
    template = TEMPLATE
    direction = "min"
    train = ("train", 200)
    # An evaluation cascade (docs/own_problem.md): a new candidate packs the first training instance
    # ("quick") first, and packs all five only if that ratio is within 2% of the archive's median.
    cascade_stage = ("quick", 200)
    cascade_margin = 0.02
    cascade_against = "median"

    def __init__(self) -> None:
        self._sets = SeededSets(5, draws_of(weibull_items, [("train", 5, (200,)), ("test", 5, (500, 1000))]))

    def splits(self) -> dict[str, list[int]]:
        return {**self._sets.splits(), "quick": [200]}

    def instances(self, split: str, size: int) -> np.ndarray:
        """(count, size) item sizes; "quick" is the training set's first instance."""
        if split == "quick":
            return self._sets.get("train", size)[:1]
        return self._sets.get(split, size)

    def decide(self, fn: Callable[..., Any], instances: np.ndarray) -> Iterator[np.ndarray]:
        """Untrusted side: pack each instance online; yield the bin index of every item."""
        for items in instances:
            remaining = np.empty(0)
            assignment = np.empty(len(items), dtype=np.int64)
            for i, item in enumerate(items):
                fits = np.flatnonzero(remaining >= item)
                options = np.append(remaining[fits], float(CAPACITY))
                scores = np.asarray(fn(float(item), options.copy()), dtype=float)
                if scores.shape != options.shape:
                    raise InvalidSolution(f"priority returned shape {scores.shape}, expected {options.shape}")
                if np.isnan(scores).any():
                    raise InvalidSolution("priority returned NaN")
                pick = as_index(np.argmax(scores), len(options), "bin")
                if pick == len(fits):  # the new bin
                    remaining = np.append(remaining, float(CAPACITY))
                    target = len(remaining) - 1
                else:
                    target = int(fits[pick])
                remaining[target] -= item
                assignment[i] = target
            yield assignment

    def score(self, decisions: list[Any], instances: np.ndarray) -> float:
        """Trusted side: bins used (recounted from the items) over the L2 bound, averaged."""
        return float(np.mean([bins_used(a, items) / l2_lower_bound(items) for a, items in zip(decisions, instances)]))

    def feedback(self, decisions: list[Any], instances: np.ndarray) -> str:
        """Trusted side, after score() accepted the decisions: where a packing loses, for the
        proposer (docs/own_problem.md, "Telling the proposer more than a score")."""
        used = [bins_used(a, items) for a, items in zip(decisions, instances)]
        over = [n - l2_lower_bound(items) for n, items in zip(used, instances)]
        fill = [items.sum() / (CAPACITY * n) for n, items in zip(used, instances)]
        return (f"bins over the lower bound, per instance: {', '.join(map(str, over))}; "
                f"bins {min(fill):.1%} to {max(fill):.1%} full on average")

    def instance_seconds(self, size: int) -> float:
        return call_budget(size, 0.01)

    def reference(self, split: str, size: int) -> Reference | None:
        """The bound itself (the objective's 1.0) is the reference; offline
        first-fit decreasing, computed here, shows what seeing all items buys."""
        ratios = []
        for items in self.instances(split, size):
            remaining: list[float] = []
            for item in sorted(items, reverse=True):
                slot = next((b for b, room in enumerate(remaining) if room >= item), None)
                if slot is None:
                    remaining.append(float(CAPACITY))
                    slot = len(remaining) - 1
                remaining[slot] -= item
            ratios.append(len(remaining) / l2_lower_bound(items))
        return Reference(float(np.mean(ratios)), "best-known",
                         "offline first-fit decreasing over the L2 bound (computed)")
