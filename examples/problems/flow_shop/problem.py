"""Permutation flow-shop scheduling: evolve a rule that orders the jobs.

Every job visits machines 1..m in the same order; every machine runs the
jobs in the same order (a permutation). The evolved function
`schedule(processing_times)` returns that permutation for a whole instance
at once, unlike the built-in tasks' step rules. Objective: the makespan
(when the last job leaves the last machine), averaged over the instances
of a set; lower is better.

Instances: processing times uniform integers in 1..99 (Taillard's
distribution), drawn from a fixed seed; n jobs x m machines per size.
Reference: NEH (Nawaz, Enscore & Ham 1983), computed here for every
instance; the template (jobs by decreasing total time, NEH's start order
without its insertion step) is well above it, so there is room to learn.

Run:   coevolve check-task examples/problems/flow_shop/problem.py
       coevolve run examples/problems/flow_shop/config.toml
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import InvalidSolution, Reference, SeededSets, check_array

MACHINES = {10: 5, 20: 5, 50: 10}  # jobs -> machines per instance size

TEMPLATE = '''import numpy as np


def schedule(processing_times):
    """Order the jobs of a permutation flow shop.

    Args:
        processing_times: 2-D numpy int array (jobs x machines, read-only);
            entry [j, k] is the time job j needs on machine k. Every job
            visits the machines in order 0, 1, ..., and every machine
            processes the jobs in the order returned.

    Returns:
        1-D numpy int array: a permutation of 0..jobs-1, the job order.
    """
    # Baseline: longest total processing time first.
    return np.argsort(-processing_times.sum(axis=1), kind="stable")
'''


def makespan(order: np.ndarray, times: np.ndarray) -> float:
    """Completion time of the last job on the last machine, jobs in `order`."""
    finish = np.zeros(times.shape[1])
    for job in order:
        row = times[job]
        finish[0] += row[0]
        for k in range(1, len(row)):
            finish[k] = max(finish[k], finish[k - 1]) + row[k]
    return float(finish[-1])


def neh(times: np.ndarray) -> np.ndarray:
    """NEH: jobs by decreasing total time, each inserted at the position
    that gives the shortest partial makespan (the first such position)."""
    order: list[int] = []
    for job in np.argsort(-times.sum(axis=1), kind="stable"):
        candidates = [order[:i] + [int(job)] + order[i:] for i in range(len(order) + 1)]
        spans = [makespan(np.asarray(c), times) for c in candidates]
        order = candidates[int(np.argmin(spans))]
    return np.asarray(order, dtype=np.int64)


def taillard_times(rng: np.random.RandomState, count: int, jobs: int) -> np.ndarray:
    return rng.randint(1, 100, size=(count, jobs, MACHINES[jobs])).astype(np.int64)


class FlowShop:
    name = "flow_shop"
    description = (
        "Permutation flow shop: n jobs each visit m machines in the same order, and every machine processes "
        "the jobs in one common order. schedule(processing_times) gets the jobs x machines matrix of "
        "processing times and returns the job order (a permutation of 0..n-1). "
        "Objective: the makespan, the time the last job finishes on the last machine; lower is better."
    )
    function_name = "schedule"
    template = TEMPLATE
    direction = "min"
    train = ("train", 20)

    def __init__(self) -> None:
        self.seed = 7

    def splits(self) -> dict[str, list[int]]:
        return {"train": [20], "test": [10, 50]}

    def instances(self, split: str, size: int) -> np.ndarray:
        """(count, jobs, machines) processing times; every (split, size) has its own seed."""
        if size not in self.splits().get(split, []):
            raise KeyError(f"no instance set {split}{size} (available: {self.splits()})")
        return _instances(self.seed, split, size)

    def decide(self, fn: Callable[..., Any], instances: np.ndarray) -> Iterator[np.ndarray]:
        for times in instances:
            order = fn(times)
            yield np.asarray(order, dtype=np.int64) if isinstance(order, (list, tuple)) else order

    def score(self, decisions: list[Any], instances: np.ndarray) -> float:
        spans = []
        for order, times in zip(decisions, instances):
            order = check_array(order, "i", (len(times),), "the job order")
            if not np.array_equal(np.sort(order), np.arange(len(times))):
                raise InvalidSolution("the job order is not a permutation of 0..n-1")
            spans.append(makespan(order, times))
        return float(np.mean(spans))

    def instance_seconds(self, size: int) -> float:
        # room for an O(n^3 m) insertion heuristic in Python
        return 2.0 + 1e-4 * size ** 3 * MACHINES[size]

    def reference(self, split: str, size: int) -> Reference | None:
        spans = [makespan(neh(times), times) for times in self.instances(split, size)]
        return Reference(float(np.mean(spans)), "best-known", "NEH (computed)")


@lru_cache(maxsize=None)
def _instances(seed: int, split: str, size: int) -> np.ndarray:
    # one RandomState per set, keyed by a stable tuple: sets do not depend on draw order
    offset = {"train": 0, "test": 1}[split]
    times = taillard_times(np.random.RandomState([seed, offset, size]), 5, size)
    times.setflags(write=False)
    return times
