"""One ant-colony core shared by the ACO tasks (TSP, CVRP, offline BPP).

The evolved function returns a prior matrix (how attractive each pair is);
the colony multiplies it with a pheromone matrix (alpha = beta = 1, as in the
reference), lets every ant build a solution, keeps the best cost, evaporates
and deposits. All ants of an iteration advance together: each construction
step is a few numpy operations over (ants x nodes) arrays.

Differences from the reference implementation, on purpose:
- every instance gets its own seeded generator (the reference leaves the
  colony unseeded), so a candidate's score is reproducible;
- the prior is validated (shape, NaN, inf -> InvalidSolution), clipped at 0,
  divided by its maximum and floored at 1e-9; scaling does not change the
  sampling probabilities, it only keeps products away from overflow;
- CVRP costs use the true distances: the reference sets the diagonal to 1
  and charges ants that finish early 1 per idle step at the depot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tasks.base import DESCRIBED_INSTANCES, InvalidSolution

PRIOR_FLOOR = 1e-9
PHEROMONE_FLOOR = 1e-10


@dataclass(frozen=True)
class ACOSet:
    """An ACO instance set with the colony settings it is evaluated with."""

    data: np.ndarray  # the instances, stacked (layout documented by each task)
    n_iterations: int  # colony iterations per instance
    seed: int  # instance i's colony uses default_rng((seed, i))

    def __len__(self) -> int:
        return len(self.data)

    def rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng((self.seed, index))


def prior_matrix(matrix: Any, size: int, name: str = "heuristics") -> np.ndarray:
    """What a heuristic returned, as a float (size, size) array (the
    candidate's side: its decision as it travels to the scorer)."""
    if matrix is None:
        raise InvalidSolution(f"{name} returned None, expected a {size}x{size} array")
    try:
        prior = np.array(matrix, dtype=float)
    except (TypeError, ValueError) as error:
        raise InvalidSolution(f"{name} returned {type(matrix).__name__}, not a numeric array ({error})") from None
    if prior.shape != (size, size):
        raise InvalidSolution(f"{name} returned shape {prior.shape}, expected ({size}, {size})")
    return prior


def prepare_prior(matrix: Any, size: int, name: str = "heuristics") -> np.ndarray:
    """Validate an evolved prior matrix and scale it to (0, 1]."""
    prior = prior_matrix(matrix, size, name)
    if np.isnan(prior).any():
        raise InvalidSolution(f"{name} returned a matrix containing NaN")
    if np.isinf(prior).any():
        raise InvalidSolution(f"{name} returned a matrix containing inf")
    np.clip(prior, 0.0, None, out=prior)
    peak = prior.max()
    prior = prior / peak if peak > 0 else np.ones_like(prior)
    return np.maximum(prior, PRIOR_FLOOR)


def prior_note(decisions: list[Any], distances: list[np.ndarray] | None = None) -> str:
    """The proposer's note on a valid program's priors as the colony uses them (scaled to (0, 1],
    what is not positive floored near 0), over the (first 64) training instances: how much of a
    step's weight the most promising move takes, how many moves are all but ruled out and, given
    each instance's distances, how often the nearest city is the most promising move."""
    peaks, ruled_out, nearest, sizes = [], [], [], []
    for index, matrix in enumerate(decisions[:DESCRIBED_INSTANCES]):
        shown = np.asarray(matrix, dtype=float)
        n = len(shown)
        if n < 2:
            continue
        moves = ~np.eye(n, dtype=bool)
        weights = np.where(moves, prepare_prior(shown, n), 0.0)
        peaks.append(float(np.mean(weights.max(axis=1) / weights.sum(axis=1))))
        ruled_out.append(float(np.mean(shown[moves] <= 0)))
        sizes.append(n)
        if distances is not None:
            closest = np.where(moves, distances[index], np.inf).argmin(axis=1)
            nearest.append(float(np.mean(weights.argmax(axis=1) == closest)))
    if not peaks:
        return ""
    note = (f"a node's most promising move takes {np.mean(peaks):.1%} of its prior weight (an even prior: "
            f"{1 / (np.mean(sizes) - 1):.1%})")
    if nearest:
        note += f", the nearest node in {np.mean(nearest):.0%} of rows"
    return note + f"; {np.mean(ruled_out):.0%} of moves are <= 0 (all but never taken)"


def colony_mean(colony: Callable[[Any, np.ndarray, ACOSet, int], float], decisions: list[Any],
                instances: ACOSet) -> float:
    """The trusted side of every ACO task's `score`: each instance's colony
    run with the prior the heuristic decided for it, averaged."""
    return float(np.mean(colony_values(colony, decisions, instances)))


def colony_values(colony: Callable[[Any, np.ndarray, ACOSet, int], float], decisions: list[Any],
                  instances: ACOSet) -> list[float]:
    """Each instance's colony run with the prior the heuristic decided for it (an ACO task's
    `instance_scores`)."""
    return [colony(prior, data, instances, i) for i, (prior, data) in enumerate(zip(decisions, instances.data))]


def aco_seconds(size: int) -> float:
    """Per-instance CPU limit of an ACO heuristic: one call that builds an
    n x n matrix (a plain Python double loop over the pairs included)."""
    return 5.0 + 5e-5 * size * size


def sample_rows(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row, drawn with probability proportional to the row's
    non-negative weights (every row must have a positive entry)."""
    cumulative = np.cumsum(weights, axis=1)
    threshold = rng.random(len(weights)) * cumulative[:, -1]
    picks = (cumulative <= threshold[:, None]).sum(axis=1)
    return np.minimum(picks, weights.shape[1] - 1)


Construct = Callable[[np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray, np.ndarray]]
Deposit = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


def run_colony(
    prior: np.ndarray,
    n_iterations: int,
    decay: float,
    construct: Construct,
    deposit: Deposit,
    rng: np.random.Generator,
) -> float:
    """Best cost over `n_iterations` of construct -> evaporate -> deposit.

    `construct(attractiveness, rng)` returns (solutions, costs, fitness) for
    all ants; `deposit(pheromone, solutions, fitness)` adds pheromone in place."""
    pheromone = np.ones_like(prior)
    best = np.inf
    for _ in range(n_iterations):
        solutions, costs, fitness = construct(pheromone * prior, rng)
        best = min(best, float(costs.min()))
        pheromone *= decay
        deposit(pheromone, solutions, fitness)
        np.maximum(pheromone, PHEROMONE_FLOOR, out=pheromone)
    return best


# --- routing: TSP (no capacity) and CVRP (depot 0, capacity) -----------------


def construct_tours(attractiveness: np.ndarray, distances: np.ndarray, n_ants: int, rng: np.random.Generator):
    """Closed tours from random start nodes; fitness is 1/length."""
    n = len(distances)
    ants = np.arange(n_ants)
    tours = np.empty((n_ants, n), dtype=np.int64)
    tours[:, 0] = current = rng.integers(n, size=n_ants)
    allowed = np.ones((n_ants, n), dtype=bool)
    allowed[ants, current] = False
    for step in range(1, n):
        current = sample_rows(attractiveness[current] * allowed, rng)
        tours[:, step] = current
        allowed[ants, current] = False
    lengths = distances[tours, np.roll(tours, -1, axis=1)].sum(axis=1)
    return tours, lengths, 1.0 / lengths


def deposit_tours(pheromone: np.ndarray, tours: np.ndarray, fitness: np.ndarray) -> None:
    following = np.roll(tours, -1, axis=1)
    amount = np.broadcast_to(fitness[:, None], tours.shape)
    np.add.at(pheromone, (tours, following), amount)
    np.add.at(pheromone, (following, tours), amount)  # tours are undirected


def construct_routes(
    attractiveness: np.ndarray,
    distances: np.ndarray,
    demands: np.ndarray,
    capacity: float,
    n_ants: int,
    rng: np.random.Generator,
):
    """CVRP routes from depot 0; an ant may return to the depot at any time
    but not stay there, and must return when no unvisited customer fits.
    Solutions are the travelled edges as arrays (ant, from, to)."""
    n = len(distances)
    ants = np.arange(n_ants)
    current = np.zeros(n_ants, dtype=np.int64)
    unvisited = np.ones((n_ants, n), dtype=bool)
    unvisited[:, 0] = False
    load = np.zeros(n_ants)
    lengths = np.zeros(n_ants)
    origins, targets, moving = [], [], []
    done = np.zeros(n_ants, dtype=bool)
    while not done.all():
        allowed = unvisited & (demands <= capacity - load[:, None])
        allowed[:, 0] = (current != 0) | done  # finished ants idle at the depot, at no cost
        chosen = sample_rows(attractiveness[current] * allowed, rng)
        lengths += distances[current, chosen]
        origins.append(current)
        targets.append(chosen)
        moving.append(~done)
        load = np.where(chosen == 0, 0.0, load + demands[chosen])
        unvisited[ants, chosen] = False
        current = chosen
        done = (current == 0) & ~unvisited.any(axis=1)
    moved = np.array(moving)  # (steps, ants): idle steps of finished ants leave no trail
    edges = (np.nonzero(moved)[1], np.array(origins)[moved], np.array(targets)[moved])
    return edges, lengths, 1.0 / lengths


def deposit_routes(pheromone: np.ndarray, edges: tuple[np.ndarray, ...], fitness: np.ndarray) -> None:
    ants, origins, targets = edges
    np.add.at(pheromone, (origins, targets), fitness[ants])


# --- offline bin packing -----------------------------------------------------


def construct_packings(
    attractiveness: np.ndarray, demands: np.ndarray, capacity: float, n_ants: int, rng: np.random.Generator
):
    """Fill bins one at a time (the reference's rule): the first item of a bin
    is uniform among the remaining items; later ones are drawn with weight
    mean(attractiveness[items in bin, item]) + 1e-5 among the items that fit.
    Solutions are bin numbers per item; fitness is mean squared fill."""
    n = len(demands)
    ants = np.arange(n_ants)
    remaining = np.ones((n_ants, n), dtype=bool)
    vacancy = np.full(n_ants, float(capacity))
    affinity = np.zeros((n_ants, n))  # summed attractiveness rows of the open bin's items
    in_bin = np.zeros(n_ants)
    bins = np.zeros(n_ants, dtype=np.int64)
    assignment = np.empty((n_ants, n), dtype=np.int64)
    fill_squares = np.zeros(n_ants)
    for _ in range(n):
        fits = remaining & (demands[None, :] <= vacancy[:, None])
        full = ~fits.any(axis=1)
        if full.any():  # close the bin, open an empty one
            fill_squares[full] += ((capacity - vacancy[full]) / capacity) ** 2
            bins[full] += 1
            vacancy[full] = capacity
            affinity[full] = 0.0
            in_bin[full] = 0
            fits[full] = remaining[full]
        weights = np.where(in_bin[:, None] > 0, affinity / np.maximum(in_bin, 1)[:, None] + 1e-5, 1.0) * fits
        chosen = sample_rows(weights, rng)
        assignment[ants, chosen] = bins
        remaining[ants, chosen] = False
        vacancy -= demands[chosen]
        affinity += attractiveness[chosen]
        in_bin += 1
    fill_squares += ((capacity - vacancy) / capacity) ** 2
    used = bins + 1
    return assignment, used.astype(float), fill_squares / used


def deposit_packings(pheromone: np.ndarray, assignment: np.ndarray, fitness: np.ndarray) -> None:
    same_bin = assignment[:, :, None] == assignment[:, None, :]
    pheromone += np.tensordot(fitness / len(fitness), same_bin, axes=1)
