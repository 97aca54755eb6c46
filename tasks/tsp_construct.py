"""Constructive TSP: evolve `select_next_node`, the step rule of a greedy
tour builder (EoH's tsp_construct, same instances and calling convention as
the Agentic-ESOpt reference code, so its published heuristics re-score)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import (DESCRIBED_INSTANCES, Draw, InvalidSolution, Reference, SeededSets, as_index, call_budget,
                        check_array, described_once, draws_of, unit_square)
from tasks.references import cached_values, checksum, lkh_tour_length

NEIGHBOURS = 50  # the reference shows at most this many nearest unvisited nodes

TEMPLATE = '''import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    """Choose the next city of a TSP tour under construction.

    Args:
        current_node: int, index of the city the tour is at now.
        destination_node: int, index of the city the tour must return to (the start).
        unvisited_nodes: 1-D numpy int array of unvisited cities, sorted from
            nearest to farthest from current_node (at most 50 of them).
        distance_matrix: 2-D numpy float array (read-only) of Euclidean
            distances between all cities.

    Returns:
        int: the next city, one of unvisited_nodes.
    """
    # Baseline: nearest neighbour.
    distances = distance_matrix[current_node][unvisited_nodes]
    return unvisited_nodes[np.argmin(distances)]
'''


def distance_matrix(coords: np.ndarray) -> np.ndarray:
    """Euclidean distances between all pairs of points, (n, 2) -> (n, n)."""
    return np.linalg.norm(coords[:, None, :] - coords[None, :, :], axis=-1)


def tour_length(tour: Any, coords: np.ndarray) -> float:
    """Length of a closed tour, checked: every city exactly once, from city 0."""
    n = len(coords)
    tour = check_array(tour, "i", (n,), "the tour")
    if n and (tour[0] != 0 or not np.array_equal(np.sort(tour), np.arange(n))):
        raise InvalidSolution("the tour does not start at city 0 and visit every city exactly once")
    distances = distance_matrix(coords)
    return float(distances[tour, np.roll(tour, -1)].sum())


def nearest_share(tour: np.ndarray, distances: np.ndarray) -> float:
    """The share of a tour's chosen steps (all but the forced last one) that went to a nearest
    unvisited city: 1.0 for nearest neighbour. One (n-2, n) masked matrix, no Python loop."""
    n = len(tour)
    if n < 3:
        return 1.0
    position = np.empty(n, dtype=np.int64)
    position[tour] = np.arange(n)
    sources = tour[:n - 2]
    # step i (1..n-2) leaves tour[i-1]; the cities still open then are those placed at i or later
    open_ = position[None, :] >= np.arange(1, n - 1)[:, None]
    closest = np.where(open_, distances[sources], np.inf).min(axis=1)
    return float(np.mean(distances[sources, tour[1:n - 1]] <= closest))


def crossings(tour: np.ndarray, coords: np.ndarray) -> int:
    """How many pairs of a closed tour's edges cross (properly: edges that share a city or only
    touch do not count); 0 for a tour 2-opt cannot shorten by uncrossing. (n, n) sign tables."""
    start, end = coords[tour], coords[np.roll(tour, -1)]

    def side(point: np.ndarray) -> np.ndarray:  # [i, j]: on which side of edge i's line edge j's `point` lies
        return np.sign((end[:, None, 0] - start[:, None, 0]) * (point[None, :, 1] - start[:, None, 1])
                       - (end[:, None, 1] - start[:, None, 1]) * (point[None, :, 0] - start[:, None, 0]))

    straddles = side(start) * side(end) < 0  # edge j's ends lie on both sides of edge i's line
    return int(np.triu(straddles & straddles.T, 1).sum())


def _tsp_draws() -> list[Draw]:
    # as the paper's code (zz1358m/Agentic-ESOpt): np.random.seed(1234), then train50,
    # val 20..200, test 20..1000.
    return draws_of(unit_square, [("train", 64, (50,)), ("val", 64, (20, 50, 100, 200)),
                                   ("test", 1000, (20, 50, 100, 200, 500, 1000))])


class TSPConstruct:
    name = "tsp_construct"
    description = (
        "Traveling Salesman Problem: find the shortest closed tour visiting every city exactly once. "
        "A tour is built step by step from city 0: at each step select_next_node picks the next city "
        "among the unvisited ones, and the tour finally returns to city 0. "
        "Design a better step rule than nearest neighbour; the score is the mean tour length (lower is better)."
    )
    function_name = "select_next_node"
    template = TEMPLATE
    direction = "min"
    train = ("train", 50)

    def __init__(self) -> None:
        self._sets = SeededSets(1234, _tsp_draws())

    def splits(self) -> dict[str, list[int]]:
        return self._sets.splits()

    def instances(self, split: str, size: int) -> np.ndarray:
        """(count, size, 2) city coordinates in the unit square."""
        return self._sets.get(split, size)

    def decide(self, fn: Callable[..., Any], instances: np.ndarray) -> Iterator[np.ndarray]:
        for coords in instances:
            yield self.build_tour(fn, coords)

    # score() is by definition the mean of instance_scores(): the sandbox computes the profile once and
    # takes its mean as the objective, without calling score() (tasks/base.py)
    score_is_instance_mean = True

    def score(self, decisions: list[Any], instances: np.ndarray) -> float:
        return float(np.mean(self.instance_scores(decisions, instances)))

    def instance_scores(self, decisions: list[Any], instances: np.ndarray) -> list[float]:
        return [tour_length(tour, coords) for tour, coords in zip(decisions, instances)]

    # behaviour descriptors of the tours (MAP-Elites' grid may use them; tasks/base.py behaviour_of):
    # `nearest`, how greedy the step rule is (1.0: nearest neighbour); `crossings`, crossing edge pairs
    # per city, how tangled its tours are (nearest neighbour about 0.11 on train50, a random
    # order about 6: the range covers the heuristics worth telling apart, the rest share the edge cell)
    decision_descriptors = {"nearest": (0.0, 1.0), "crossings": (0.0, 0.4)}

    @described_once
    def describe_decisions(self, decisions: list[Any], instances: np.ndarray) -> dict[str, float]:
        """Trusted side, on tours score() accepted: each descriptor's mean over the (first 64) instances."""
        nearest, crossed = [], []
        for tour, coords in zip(decisions[:DESCRIBED_INSTANCES], instances[:DESCRIBED_INSTANCES]):
            tour = np.asarray(tour, dtype=np.int64)
            nearest.append(nearest_share(tour, distance_matrix(coords)))
            crossed.append(crossings(tour, coords) / max(len(tour), 1))
        return {"nearest": float(np.mean(nearest)), "crossings": float(np.mean(crossed))}

    def feedback(self, decisions: list[Any], instances: np.ndarray) -> str:
        """Trusted side, on tours score() accepted: what the proposer reads under the program."""
        seen = self.describe_decisions(decisions, instances)
        return (f"its tours go to the nearest unvisited city at {seen['nearest']:.0%} of steps and have "
                f"{seen['crossings']:.2f} pairs of crossing edges per city (uncrossing a pair shortens a tour)")

    def instance_seconds(self, size: int) -> float:
        # n-2 calls; a call may scan the whole distance matrix row (O(n))
        return call_budget(size - 2, 0.02 + 2e-5 * size)

    def build_tour(self, fn: Callable[..., Any], coords: np.ndarray) -> np.ndarray:
        """Build one tour with `fn` (the reference's loop): the city order, from city 0."""
        n = len(coords)
        distances = distance_matrix(coords)
        by_distance = np.argsort(distances, axis=1)[:, 1:]  # column 0 is the node itself
        distances.setflags(write=False)  # a heuristic that edits it fails instead of corrupting later steps
        visited = np.zeros(n, dtype=bool)
        visited[0] = True
        route = [0]
        current = 0
        for step in range(1, n - 1):
            near = by_distance[current]
            unvisited = near[~visited[near]][:NEIGHBOURS]
            chosen = as_index(fn(current, 0, unvisited, distances), n, "node")
            if visited[chosen]:
                raise InvalidSolution(f"node {chosen} was already visited (step {step})")
            visited[chosen] = True
            route.append(chosen)
            current = chosen
        if n > 1:
            route.append(int(np.flatnonzero(~visited)[0]))  # the last node is forced
        return np.asarray(route, dtype=np.int64)

    def reference(self, split: str, size: int) -> Reference | None:
        instances = self.instances(split, size)
        values = cached_values(
            f"{self.name}-{split}-{size}", instances, lkh_tour_length, f"{checksum(instances)}-lkh-runs1"
        )
        return Reference(float(values.mean()), "best-known", "LKH-3 via elkai (runs=1)")
