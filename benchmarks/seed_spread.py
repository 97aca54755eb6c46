"""What one seed says about a randomised heuristic, and what `[sandbox] seeds` costs.

A nearest-neighbour TSP heuristic that picks at random among the `k` nearest
unvisited cities is scored on tsp_construct's training set (64 instances of 50
cities) once per seed of its generators (seeds 0..N-1, one Sandbox each time
with a module-level `random.seed(s)`, the state the worker's seed s gives), then
by `Sandbox(seeds=N)` in one call. Printed: each seed's objective, their mean and
spread, how far seed 0 (what a run scores by default) lies from the mean in
standard deviations, whether `Sandbox(seeds=N)` returns exactly that mean, and
the wall time of a step's worth of scoring (`evaluate_many` of 4 programs, as a
search scores a batch) under `Sandbox(seeds=N)` against `Sandbox(seeds=1)`,
measured side by side in this run (alternating, best of 3 each).

    .venv/bin/python benchmarks/seed_spread.py [--seeds 8] [--nearest 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from coevolve.sandbox import Sandbox

HEURISTIC = '''import random

import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    """One of the {k} nearest unvisited cities, at random."""
    order = np.argsort(distance_matrix[current_node][unvisited_nodes])[:{k}]
    return unvisited_nodes[random.choice(list(order))]
'''


BATCH = 4  # programs scored in one call, as a search step scores its candidates


def timed(sandbox: Sandbox, code: str, batch: int = 1) -> tuple[float, float]:
    began = time.perf_counter()
    results = sandbox.evaluate_many([(code, "tsp_construct", None, None)] * batch)
    assert all(r.ok for r in results), results[0].message
    return results[0].objective, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--nearest", type=int, default=3)
    args = parser.parse_args()
    code = HEURISTIC.replace("{k}", str(args.nearest))
    with Sandbox(workers=2, timeout_s=120) as one, Sandbox(workers=2, timeout_s=120, seeds=args.seeds) as many:
        timed(one, code)  # workers started and the instances drawn before anything is timed
        timed(many, code)
        per_seed = [timed(one, f"import random\nrandom.seed({s})\n" + code)[0] for s in range(args.seeds)]
        times_one, times_many, combined = [], [], None
        for _ in range(3):
            times_one.append(timed(one, code, BATCH)[1])
            combined, seconds = timed(many, code, BATCH)
            times_many.append(seconds)
    mean, spread = statistics.fmean(per_seed), statistics.stdev(per_seed)
    print(f"tsp_construct train (64 x 50 cities), one of the {args.nearest} nearest at random, "
          f"{args.seeds} seeds of the program's generators")
    for s, value in enumerate(per_seed):
        print(f"  seed {s}: {value:.5f}")
    print(f"mean {mean:.5f}, std {spread:.5f}, min {min(per_seed):.5f}, max {max(per_seed):.5f} "
          f"(max - min = {100 * (max(per_seed) - min(per_seed)) / mean:.2f}% of the mean)")
    print(f"seed 0 alone (a run's default score) is {(per_seed[0] - mean) / spread:+.2f} std from the mean")
    print(f"Sandbox(seeds={args.seeds}) objective {combined:.5f}: "
          f"{'equal to' if abs(combined - mean) <= 1e-9 * abs(mean) else 'DIFFERENT FROM'} the mean of the seeds")
    print(f"scoring {BATCH} programs, wall time best of 3: seeds=1 {min(times_one):.3f} s, seeds={args.seeds} "
          f"{min(times_many):.3f} s, ratio {min(times_many) / min(times_one):.2f} (2 workers)")


if __name__ == "__main__":
    main()
