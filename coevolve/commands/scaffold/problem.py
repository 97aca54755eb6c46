"""__NAME__: a coevolve task (written by `coevolve new-task __NAME__`; edit it).

The problem here is a placeholder to replace with yours: online load
balancing. Jobs arrive one by one and each goes to one of a few machines at
once; the heuristic being evolved, `choose_machine`, makes that choice. The
objective is the makespan (the largest machine load) divided by a lower
bound, so 1.0 is perfect and lower is better.

How coevolve uses this file (docs/own_problem.md):
- `template` is the starting program; the LLM rewrites `choose_machine`.
- `decide` runs in the candidate's confined process: it calls the
  heuristic and yields plain data only (numbers, lists, int64/float64 numpy
  arrays), one item per instance.
- `score` runs in the trusted worker: it checks those decisions against its
  own copy of the instances (raise InvalidSolution for a bad one) and
  returns the mean objective. It never trusts what the heuristic claims.
- Instance sets are drawn from fixed seeds, so every process draws the same.

Check it:  coevolve check-task problem.py
Run it:    coevolve run config.toml
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import InvalidSolution, Reference, SeededSets, as_index, call_budget, check_array, draws_of

MACHINES = 4

TEMPLATE = '''import numpy as np


def choose_machine(job, loads):
    """Pick the machine for an arriving job.

    Args:
        job: float, the processing time of the arriving job.
        loads: 1-D numpy float array, the current load of each machine.

    Returns:
        int: the index of the machine that gets the job.
    """
    # Baseline: the least loaded machine (Graham's list scheduling).
    return int(np.argmin(loads))
'''


def make_jobs(rng: np.random.RandomState, count: int, size: int) -> np.ndarray:
    """`count` instances of `size` job lengths (log-normal: a few long jobs among many short)."""
    return np.round(rng.lognormal(mean=1.0, sigma=0.8, size=(count, size)), 3)


def lower_bound(jobs: np.ndarray) -> float:
    """No schedule beats the average load, nor the longest job."""
    return max(float(jobs.sum()) / MACHINES, float(jobs.max()))


class __CLASS__:
    name = "__NAME__"
    description = (
        f"Online load balancing: jobs arrive one at a time and each must be assigned at once to one of "
        f"{MACHINES} machines. choose_machine(job, loads) returns the machine for the arriving job. "
        "The score is the makespan (largest machine load) divided by a lower bound: lower is better, 1.0 is optimal."
    )
    function_name = "choose_machine"
    template = TEMPLATE
    direction = "min"
    train = ("train", 50)  # (split, size) scored during the search

    def __init__(self) -> None:
        # One seeded stream: (split, instances per set, sizes). Same seed, same sets, in every process.
        self._sets = SeededSets(2024, draws_of(make_jobs, [("train", 8, (50,)), ("test", 16, (50, 200))]))

    def splits(self) -> dict[str, list[int]]:
        return self._sets.splits()

    def instances(self, split: str, size: int) -> np.ndarray:
        """(count, size) job lengths."""
        return self._sets.get(split, size)

    def decide(self, fn: Callable[..., Any], instances: np.ndarray) -> Iterator[np.ndarray]:
        """Untrusted side: the machine chosen for each job, one int64 array per instance."""
        for jobs in instances:
            loads = np.zeros(MACHINES)
            chosen = np.empty(len(jobs), dtype=np.int64)
            for i, job in enumerate(jobs):
                machine = as_index(fn(float(job), loads.copy()), MACHINES, "machine")
                loads[machine] += job
                chosen[i] = machine
            yield chosen

    def score(self, decisions: list[Any], instances: np.ndarray) -> float:
        """Trusted side: recompute every load from the instances, never from the decisions' claims.
        The sandbox calls it on every program: its verdict (InvalidSolution) and its mean objective count.
        Here it is the mean of instance_scores(), which holds the checks, so the two cannot disagree; a
        check you add to either one always counts. (A task whose scoring is costly can declare
        `score_is_instance_mean = True`: the sandbox then takes the mean of instance_scores() and never
        calls score(), so every check must be in instance_scores(). Not worth it here.)"""
        return float(np.mean(self.instance_scores(decisions, instances)))

    def instance_scores(self, decisions: list[Any], instances: np.ndarray) -> list[float]:
        """Optional: each instance's objective, whose mean is score(). With it the proposer sees, under
        each parent, on how many instances it beats the template."""
        ratios = []
        for chosen, jobs in zip(decisions, instances):
            chosen = check_array(chosen, "i", (len(jobs),), "the assignment")
            if chosen.min() < 0 or chosen.max() >= MACHINES:
                raise InvalidSolution(f"a machine index is outside 0..{MACHINES - 1}")
            loads = np.bincount(chosen, weights=jobs, minlength=MACHINES)
            ratios.append(float(loads.max() / lower_bound(jobs)))
        return ratios

    def feedback(self, decisions: list[Any], instances: np.ndarray) -> str:
        """Optional: a note the proposer reads under a valid parent (trusted side, after score()
        accepted the decisions; docs/own_problem.md). Delete it when the score says enough."""
        ratios = self.instance_scores(decisions, instances)
        worst = int(np.argmax(ratios))
        return f"worst on instance {worst} (makespan {ratios[worst]:.3f} x the bound), best {min(ratios):.3f} x"

    def instance_seconds(self, size: int) -> float:
        """CPU seconds a heuristic may spend on one instance (a hang fails at this limit)."""
        return call_budget(size, 0.01)

    def reference(self, split: str, size: int) -> Reference | None:
        """Optional: a computed reference for `coevolve eval` (None when there is none).
        Here: offline LPT (longest job first to the least loaded machine), which sees all jobs up front."""
        ratios = []
        for jobs in self.instances(split, size):
            loads = np.zeros(MACHINES)
            for job in sorted(jobs, reverse=True):
                loads[np.argmin(loads)] += job
            ratios.append(loads.max() / lower_bound(jobs))
        return Reference(float(np.mean(ratios)), "best-known", "offline LPT (computed)")
