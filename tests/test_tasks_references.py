"""References: LKH and the knapsack DP agree with brute force on small
instances; the on-disk cache resumes, invalidates and never double-solves."""

import itertools
import json
import math

import numpy as np
import pytest

from tasks import references
from tasks.base import evaluate_in_process, gap
from tasks.references import cached_values, checksum, knapsack_optimum, lkh_tour_length


def brute_force_tour(points) -> float:
    n = len(points)
    best = math.inf
    for order in itertools.permutations(range(1, n)):
        tour = (0,) + order
        best = min(best, sum(math.dist(points[a], points[b]) for a, b in zip(tour, tour[1:] + tour[:1])))
    return best


def brute_force_knapsack(weights, values, capacity) -> float:
    best = 0.0
    for mask in itertools.product([False, True], repeat=len(weights)):
        chosen = np.array(mask)
        if weights[chosen].sum() <= capacity:
            best = max(best, values[chosen].sum())
    return best


def test_lkh_is_optimal_on_small_instances():
    rng = np.random.default_rng(0)
    for _ in range(4):
        points = rng.random((8, 2))
        assert lkh_tour_length(points) == pytest.approx(brute_force_tour(points.tolist()), abs=1e-5)


def test_knapsack_dp_is_exact():
    rng = np.random.default_rng(1)
    for _ in range(30):
        n = int(rng.integers(1, 13))
        weights, values = rng.random(n), rng.random(n)
        capacity = float(rng.random() * n / 3)
        assert knapsack_optimum(weights, values, capacity) == pytest.approx(
            brute_force_knapsack(weights, values, capacity), abs=1e-12
        )


def test_cache_resumes_and_invalidates(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    instances = np.arange(6.0).reshape(3, 2)
    solved = []

    def solve(row):
        solved.append(row[0])
        return row.sum()

    first = cached_values("demo-test-2", instances, solve, "fp1")
    assert first.tolist() == [1.0, 5.0, 9.0] and len(solved) == 3
    path = tmp_path / "references" / "demo-test-2.json"
    assert json.loads(path.read_text())["values"] == [1.0, 5.0, 9.0]

    # a half-finished file (as left by an interrupted run) is completed, not redone
    path.write_text(json.dumps({"fingerprint": "fp1", "values": [1.0, None, 9.0]}))
    solved.clear()
    assert cached_values("demo-test-2", instances, solve, "fp1").tolist() == [1.0, 5.0, 9.0]
    assert solved == [2.0]

    # other instances or settings: recomputed
    solved.clear()
    cached_values("demo-test-2", instances, solve, "fp2")
    assert len(solved) == 3


def test_a_long_solve_says_so_first_and_an_interrupted_one_keeps_what_it_solved(tmp_path, monkeypatch, capsys):
    """`eval` of every tsp test size solved LKH on 1000 instances of 1000 cities (hours) without a word,
    and a Ctrl-C lost up to SAVE_EVERY_SECONDS of it: the solve says what it starts, how far it is, and
    keeps every value solved before the interrupt."""
    import tasks.references as references

    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    monkeypatch.setattr(references, "SAY_EVERY_SECONDS", 0.0)
    instances = np.arange(8.0).reshape(4, 2)

    def solve(row):
        if row[0] == 4.0:  # the third instance: the user presses Ctrl-C
            raise KeyboardInterrupt
        return row.sum()

    with pytest.raises(KeyboardInterrupt):
        cached_values("demo-test-4", instances, solve, "fp")
    err = capsys.readouterr().err
    assert f"reference demo-test-4: solving 4 of 4 instances, cached in {tmp_path / 'references'}" in err
    assert "reference demo-test-4: 1 of 4 solved, about 0 min left" in err
    kept = json.loads((tmp_path / "references" / "demo-test-4.json").read_text())["values"]
    assert kept == [1.0, 5.0, None, None]
    assert cached_values("demo-test-4", instances, lambda row: row.sum(), "fp").tolist() == [1.0, 5.0, 9.0, 13.0]
    assert "solving 2 of 4" in capsys.readouterr().err
    cached_values("demo-test-4", instances, solve, "fp")  # all cached: nothing said
    assert capsys.readouterr().err == ""


def test_corrupt_cache_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        cached_values("bad", np.zeros((1, 2)), lambda row: 0.0, "fp")


def test_task_references_on_small_sets(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    from tasks.registry import get_task

    tsp_aco = get_task("tsp_aco")
    reference = tsp_aco.reference("train", 50)  # 5 LKH solves
    assert reference.kind == "best-known" and 5.0 < reference.value < 6.5
    assert (tmp_path / "references" / "tsp_aco-train-50.json").exists()

    kp = get_task("kp_construct")
    exact = kp.reference("train", 100)
    assert exact.kind == "exact"
    namespace: dict = {}
    exec(kp.template, namespace)
    greedy = evaluate_in_process(kp, namespace["select_next_item"], kp.instances("train", 100))
    assert 0 < gap(greedy, exact.value, "max") < 0.02  # ratio-greedy is within 2% of optimal

    cvrp = get_task("cvrp_aco")
    hgs = cvrp.reference("train", 50)  # 5 HGS solves, cached like the TSP references
    assert hgs.kind == "best-known" and "PyVRP" in hgs.source
    assert (tmp_path / "references" / "cvrp_aco-train-50.json").exists()
    namespace = {}
    exec(cvrp.template, namespace)
    aco = evaluate_in_process(cvrp, namespace["heuristics"], cvrp.instances("train", 50))
    assert 0 < gap(aco, hgs.value, "min") < 1.0  # the template's short ACO is worse than HGS (66% here)
    assert get_task("bpp_aco").reference("train", 120).kind == "bound"


def _cvrp_optimum(rows: np.ndarray, capacity: int) -> float:
    """Brute force: every visiting order, each split optimally into capacity-feasible routes."""
    demands, coords = rows[:, 0], rows[:, 1:]
    d = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    best = math.inf
    for order in itertools.permutations(range(1, len(rows))):
        cost = [0.0] + [math.inf] * len(order)  # cost[j]: best split of the first j customers
        for i in range(len(order)):
            load, length = 0.0, 0.0
            for j in range(i, len(order)):
                load += demands[order[j]]
                if load > capacity:
                    break
                length = length + (d[0, order[j]] if j == i else d[order[j - 1], order[j]])
                cost[j + 1] = min(cost[j + 1], cost[i] + length + d[order[j], 0])
        best = min(best, cost[-1])
    return best


def test_hgs_cvrp_is_optimal_on_small_instances():
    from tasks.references import hgs_cvrp_cost

    rng = np.random.default_rng(7)
    for capacity in (10, 15, 40):
        rows = np.column_stack([rng.integers(1, 10, 7).astype(float), rng.random((7, 2))])
        rows[0, 0] = 0.0  # the depot
        assert hgs_cvrp_cost(rows, capacity) == pytest.approx(_cvrp_optimum(rows, capacity), abs=1e-5)


def test_checksum_matches_the_notes_convention():
    data = np.random.RandomState(1234).rand(64, 50, 2)
    assert checksum(data) == "bee6f8b6bf7f4678"
    assert references.cache_dir().name == "references"
