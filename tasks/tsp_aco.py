"""TSP with ant colony optimisation: evolve `heuristics(distance_matrix)`, the
prior matrix that guides the ants (ReEvo / Agentic-ESOpt tsp_aco)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from tasks.aco import (ACOSet, aco_seconds, colony_mean, colony_values, prior_matrix, prior_note,
                       construct_tours, deposit_tours, prepare_prior, run_colony)
from tasks.base import DESCRIBED_INSTANCES, Draw, Reference, SeededSets, draws_of, unit_square
from tasks.references import cached_values, checksum, lkh_tour_length
from tasks.tsp_construct import distance_matrix

N_ANTS = 30
N_ITERATIONS = 100
DECAY = 0.9
COLONY_SEED = 7

TEMPLATE = '''import numpy as np


def heuristics(distance_matrix):
    """Prior desirability of every edge for an ant colony solving a TSP.

    Args:
        distance_matrix: (n, n) numpy float array of Euclidean distances
            between cities; the diagonal is set to 1.

    Returns:
        (n, n) numpy float array: how promising it is to travel from city i to
        city j (larger is more promising; negative values count as 0). Ants
        choose the next city with probability proportional to
        pheromone * this prior.
    """
    # Baseline: closer cities are more promising.
    return 1.0 / distance_matrix
'''


def _tsp_aco_draws() -> list[Draw]:
    # as the paper's code draws them (zz1358m/Agentic-ESOpt; its data files' checksums are
    # tested for train50 and test50): np.random.seed(1234),
    # train 5x50, val 64 each of 20/50/100, then test 64 each of 50/100/200.
    return draws_of(unit_square, [("train", 5, (50,)), ("val", 64, (20, 50, 100)), ("test", 64, (50, 100, 200))])


class TSPACO:
    name = "tsp_aco"
    description = (
        "Traveling Salesman Problem solved by ant colony optimisation: ants build tours city by city, "
        "choosing each next city with probability proportional to pheromone times a prior. "
        "Write heuristics(distance_matrix), which returns that prior for every pair of cities; "
        "the score is the mean length of the best tour found (lower is better)."
    )
    function_name = "heuristics"
    template = TEMPLATE
    direction = "min"
    train = ("train", 50)

    def __init__(self) -> None:
        self._sets = SeededSets(1234, _tsp_aco_draws())

    def splits(self) -> dict[str, list[int]]:
        return self._sets.splits()

    def instances(self, split: str, size: int) -> ACOSet:
        """data: (count, size, 2) city coordinates; 30 ants, 100 iterations."""
        return ACOSet(self._sets.get(split, size), N_ITERATIONS, COLONY_SEED)

    def decide(self, fn: Callable[..., Any], instances: ACOSet) -> Iterator[np.ndarray]:
        for coords in instances.data:
            shown = distance_matrix(coords)
            np.fill_diagonal(shown, 1.0)  # the reference's convention: 1/d stays finite
            yield prior_matrix(fn(shown), len(coords))

    # score() is by definition the mean of instance_scores(): the sandbox computes the profile once and
    # takes its mean as the objective, without calling score() (tasks/base.py)
    score_is_instance_mean = True

    def score(self, decisions: list[Any], instances: ACOSet) -> float:
        return colony_mean(self.colony, decisions, instances)

    def instance_scores(self, decisions: list[Any], instances: ACOSet) -> list[float]:
        return colony_values(self.colony, decisions, instances)

    def feedback(self, decisions: list[Any], instances: ACOSet) -> str:
        """Trusted side, on priors score() accepted: what the proposer reads under the program."""
        return prior_note(decisions, [distance_matrix(coords) for coords in instances.data[:DESCRIBED_INSTANCES]])

    def instance_seconds(self, size: int) -> float:
        return aco_seconds(size)

    def colony(self, matrix: Any, coords: np.ndarray, settings: ACOSet, index: int) -> float:
        """Best tour length the colony finds with the heuristic's prior `matrix`."""
        distances = distance_matrix(coords)
        return run_colony(
            prepare_prior(matrix, len(coords)),
            settings.n_iterations,
            DECAY,
            lambda attractiveness, rng: construct_tours(attractiveness, distances, N_ANTS, rng),
            deposit_tours,
            settings.rng(index),
        )

    def reference(self, split: str, size: int) -> Reference | None:
        coords = self._sets.get(split, size)
        values = cached_values(
            f"{self.name}-{split}-{size}", coords, lkh_tour_length, f"{checksum(coords)}-lkh-runs1"
        )
        return Reference(float(values.mean()), "best-known", "LKH-3 via elkai (runs=1)")
