"""The shared ant-colony core and the three ACO tasks: solutions are
feasible, runs are reproducible per instance, the colony learns, and bad
prior matrices are InvalidSolution."""

import numpy as np
import pytest

from tasks.aco import (
    ACOSet,
    construct_packings,
    construct_routes,
    construct_tours,
    prepare_prior,
    run_colony,
    deposit_tours,
    sample_rows,
)
from tasks.base import InvalidSolution, evaluate_in_process
from tasks.registry import get_task
from tasks.tsp_construct import distance_matrix


def load(task):
    namespace: dict = {}
    exec(task.template, namespace)
    return namespace[task.function_name]


def test_sampling_follows_the_weights():
    rng = np.random.default_rng(0)
    weights = np.tile([0.0, 1.0, 3.0, 0.0, 6.0], (100_000, 1))
    counts = np.bincount(sample_rows(weights, rng), minlength=5) / len(weights)
    assert counts[0] == counts[3] == 0
    assert counts[[1, 2, 4]] == pytest.approx([0.1, 0.3, 0.6], abs=0.01)


def test_tours_are_permutations_with_their_true_length():
    rng = np.random.default_rng(1)
    coords = rng.random((30, 2))
    distances = distance_matrix(coords)
    tours, lengths, fitness = construct_tours(np.ones((30, 30)), distances, 12, rng)
    for tour, length in zip(tours, lengths):
        assert sorted(tour) == list(range(30))
        assert length == pytest.approx(sum(distances[a, b] for a, b in zip(tour, np.roll(tour, -1))))
    assert np.allclose(fitness, 1 / lengths)


def test_routes_visit_every_customer_once_within_capacity():
    rng = np.random.default_rng(2)
    coords = rng.random((41, 2))
    demands = np.concatenate([[0], rng.integers(1, 10, 40)]).astype(float)
    distances = distance_matrix(coords)
    (ants, origins, targets), lengths, _ = construct_routes(np.ones((41, 41)), distances, demands, 50, 8, rng)
    for ant in range(8):
        mine = ants == ant
        path = [0] + targets[mine].tolist()
        assert np.array_equal(origins[mine], path[:-1])  # edges chain up
        assert path[-1] == 0
        customers = [node for node in path if node]
        assert sorted(customers) == list(range(1, 41))
        load = 0.0
        for node in path[1:]:
            load = 0.0 if node == 0 else load + demands[node]
            assert load <= 50
        assert lengths[ant] == pytest.approx(sum(distances[a, b] for a, b in zip(path, path[1:])))


def test_packings_assign_every_item_within_capacity():
    rng = np.random.default_rng(3)
    demands = rng.integers(20, 101, 60).astype(float)
    assignment, bins, fitness = construct_packings(np.ones((60, 60)), demands, 150, 10, rng)
    for ant in range(10):
        loads = np.bincount(assignment[ant], weights=demands)
        assert len(loads) == bins[ant] and loads.max() <= 150 and loads.min() > 0
        assert fitness[ant] == pytest.approx(np.mean((loads / 150) ** 2))
    assert bins.min() >= np.ceil(demands.sum() / 150)


def test_colony_learns_over_iterations():
    rng_coords = np.random.default_rng(4).random((30, 2))
    distances = distance_matrix(rng_coords)
    prior = prepare_prior(1 / (distances + np.eye(30)), 30)

    def best(iterations):
        return run_colony(
            prior, iterations, 0.9,
            lambda a, rng: construct_tours(a, distances, 20, rng), deposit_tours,
            np.random.default_rng(5),
        )

    assert best(40) < 0.85 * best(1)


@pytest.mark.parametrize(
    "matrix, message",
    [
        (None, "None"),
        (np.ones((3, 4)), "shape"),
        ("abc", "not a numeric array|shape"),
        (np.full((4, 4), np.nan), "NaN"),
        (np.full((4, 4), np.inf), "inf"),
        ([[1, 2], [3]], "not a numeric array"),
    ],
)
def test_bad_priors_are_invalid(matrix, message):
    with pytest.raises(InvalidSolution, match=message):
        prepare_prior(matrix, 4)


def test_prior_is_scaled_and_floored():
    prior = prepare_prior(np.array([[-5.0, 0.0], [2.0, 1e300]]), 2)
    assert prior.max() == 1.0 and prior.min() == pytest.approx(1e-9)


@pytest.mark.parametrize("name", ["tsp_aco", "cvrp_aco", "bpp_aco"])
def test_task_baseline_is_reproducible_and_above_the_reference(name):
    task = get_task(name)
    full = task.instances(*task.train)
    small = ACOSet(full.data[:2], 5, full.seed)
    fn = load(task)
    first = evaluate_in_process(task, fn, small)
    assert evaluate_in_process(task, fn, small) == first  # seeded per instance
    assert evaluate_in_process(task, fn, ACOSet(full.data[:2], 5, full.seed + 1)) != first
    bounds = {"tsp_aco": 5.0, "cvrp_aco": 8.0, "bpp_aco": 45.0}
    assert first > bounds[name]


@pytest.mark.parametrize("name", ["tsp_aco", "cvrp_aco", "bpp_aco"])
def test_task_rejects_a_wrong_shape(name):
    task = get_task(name)
    full = task.instances(*task.train)
    with pytest.raises(InvalidSolution, match="shape"):
        evaluate_in_process(task, lambda *args: np.ones((3, 3)), ACOSet(full.data[:1], 1, 0))


def test_cvrp_heuristic_sees_depot_first_and_the_capacity():
    task = get_task("cvrp_aco")
    full = task.instances("test", 20)
    seen = {}

    def spy(distance_matrix, coordinates, demands, capacity):
        seen.update(shape=distance_matrix.shape, depot=coordinates[0].tolist(), demand0=demands[0], capacity=capacity)
        return 1 / distance_matrix

    evaluate_in_process(task, spy, ACOSet(full.data[:1], 1, 0))
    assert seen == {"shape": (21, 21), "depot": [0.5, 0.5], "demand0": 0.0, "capacity": 50}


def test_better_prior_scores_better_on_tsp():
    task = get_task("tsp_aco")
    full = task.instances(*task.train)
    small = ACOSet(full.data[:2], 10, full.seed)
    informed = evaluate_in_process(task, load(task), small)
    blind = evaluate_in_process(task, lambda d: np.ones_like(d), small)
    assert informed < blind
