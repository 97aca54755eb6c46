"""Table 5 of the paper, checked from outside the implementation: the plan
scores the table's six test columns, on sets that reproduce the table's own
numbers when the paper's published heuristics are scored on them, and the KP
optimum agrees with a second, independent exact solver."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coevolve.plan import load_compare_config, scored_sets
from tasks.base import evaluate_in_process
from tasks.registry import heuristic_task

ROOT = Path(__file__).resolve().parents[1]

# Table 5's columns (task, size as the task names it, instances, what the paper calls it)
TABLE5_COLUMNS = [
    ("tsp_construct", 20, 1000, "TSP N=20"), ("tsp_construct", 50, 1000, "TSP N=50"),
    ("kp_construct", 50, 1000, "KP N=50, W=12.5"), ("kp_construct", 100, 1000, "KP N=100, W=25"),
    ("asp", 15, None, "ASP (15, 10)"), ("asp", 21, None, "ASP (21, 15)"),
]
# Table 5, EoH+ESOpt at T = 1000 (mean of the three runs whose programs the reference publishes)
EOH_ESOPT_T1000 = {("kp_construct", 50): 20.0007, ("kp_construct", 100): 40.2351,
                   ("asp", 15): 2770.0, ("asp", 21): 30887.33}


def test_table5_preset_plans_the_papers_six_columns():
    config = load_compare_config(ROOT / "examples" / "paper" / "table5.toml")
    planned = [(task, size) for task in config.compare.tasks
               for split, size in scored_sets(config, heuristic_task(task)) if split == "test"]
    assert planned == [(task, size) for task, size, _, _ in TABLE5_COLUMNS]
    assert config.test.limit == 0  # every instance
    for task, size, count, _ in TABLE5_COLUMNS:
        instances = heuristic_task(task).instances("test", size)
        if count is not None:
            assert len(instances) == count
    from tasks.kp_construct import CAPACITY

    assert (CAPACITY[50], CAPACITY[100]) == (12.5, 25.0)
    assert [(s.n, s.w) for s in (heuristic_task("asp").instances("test", n) for n in (15, 21))] == [(15, 10), (21, 15)]


@pytest.mark.parametrize("task_name,size", list(EOH_ESOPT_T1000), ids=lambda v: str(v))
def test_published_programs_rescore_to_table5(task_name, size):
    """The reference publishes its EoH+ESOpt T = 1000 programs (tests/data/paper_programs);
    their mean on each column's set is the number Table 5 prints, so the set, its
    capacity or (n, w), and the scoring are the paper's."""
    from paper_programs import published_scores

    scores = published_scores(task_name, "test", size)
    assert round(float(np.mean(scores)), 2 if task_name == "asp" else 4) == EOH_ESOPT_T1000[(task_name, size)]


def branch_and_bound_knapsack(weights: np.ndarray, values: np.ndarray, capacity: float) -> float:
    """Exact 0-1 knapsack by depth-first branch and bound (Horowitz-Sahni): items
    by value density, the fractional relaxation as the bound. Shares nothing with
    tasks.references.knapsack_optimum (a Pareto-front dynamic programme)."""
    order = sorted(range(len(weights)), key=lambda i: -values[i] / weights[i])
    w = [float(weights[i]) for i in order]
    v = [float(values[i]) for i in order]
    best = 0.0

    def bound(k: int, room: float, value: float) -> float:
        while k < len(w) and w[k] <= room:
            room, value, k = room - w[k], value + v[k], k + 1
        return value + (v[k] * room / w[k] if k < len(w) else 0.0)

    def search(k: int, room: float, value: float) -> None:
        nonlocal best
        best = max(best, value)
        if k == len(w) or bound(k, room, value) <= best + 1e-12:
            return
        if w[k] <= room:
            search(k + 1, room - w[k], value + v[k])
        search(k + 1, room, value)

    search(0, float(capacity), 0.0)
    return best


def test_kp_optimum_agrees_with_an_independent_exact_solver():
    """Per instance on the paper's KP50 and KP100 sets (their first 60), and the
    mean over all 1000 against Table 5's Optimal row: 20.0370 for KP50. For KP100
    the table prints 40.2710 while the exact optimum of the reference's test100
    set is 40.2723 (both solvers agree on every instance; docs/compare.md lists it)."""
    from tasks.references import knapsack_optimum

    task = heuristic_task("kp_construct")
    for size, capacity in ((50, 12.5), (100, 25.0)):
        for items in task.instances("test", size)[:60]:
            exact = branch_and_bound_knapsack(items[:, 0], items[:, 1], capacity)
            assert knapsack_optimum(items[:, 0], items[:, 1], capacity) == pytest.approx(exact, abs=1e-9)
    assert task.reference("test", 50).value == pytest.approx(20.0370, abs=2e-4)
    assert task.reference("test", 100).value == pytest.approx(40.2723, abs=1e-4)


def test_asp_references_are_table5s_optimal_row():
    task = heuristic_task("asp")
    assert [task.reference("test", n).value for n in (15, 21)] == [3003.0, 43596.0]


def test_reference_start_is_asps_return_1_seed():
    """start.program = "reference": ASP starts from the reference's `return 1`
    (every candidate ties, the construction's own order: 1842 on (15, 10)); tasks
    without a reference seed start from their template."""
    from tasks.base import starting_program

    asp = heuristic_task("asp")
    namespace: dict = {}
    exec(starting_program(asp, "reference"), namespace)
    assert namespace["priority"]((1, 2, 0), 3, 2) == 1.0
    assert evaluate_in_process(asp, namespace["priority"], asp.instances("test", 15)) == 1842.0
    assert starting_program(asp, "template") == asp.template
    tsp = heuristic_task("tsp_construct")
    assert starting_program(tsp, "reference") == tsp.template
