"""Reference objectives for instance sets, computed lazily and cached on disk.

LKH on 1000 test instances takes minutes to hours, so per-instance values are
stored in one JSON file per (task, split, size) under
$COEVOLVE_CACHE/references (default ~/.cache/coevolve/references). The file
records a checksum of the instances, so a changed generator never reuses
stale values, and it is rewritten as work progresses, so an interrupted run
keeps what it computed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from coevolve.base.durable import atomic_write_json

SAVE_EVERY_SECONDS = 10.0
SAY_EVERY_SECONDS = 60.0  # how often a long solve says how far it is


def cache_dir() -> Path:
    root = os.environ.get("COEVOLVE_CACHE") or str(Path.home() / ".cache" / "coevolve")
    return Path(root) / "references"


def checksum(array: np.ndarray) -> str:
    """sha256[:16] over float64 C-order bytes: how the tests pin the reference repo's data files."""
    data = np.ascontiguousarray(np.asarray(array, dtype=np.float64))
    return hashlib.sha256(data.tobytes()).hexdigest()[:16]


def cached_values(
    key: str,
    instances: Sequence[np.ndarray] | np.ndarray,
    solve_one: Callable[[np.ndarray], float],
    fingerprint: str,
) -> np.ndarray:
    """Per-instance reference values for `instances`, solving only the missing
    ones. `key` names the cache file (e.g. "tsp_construct-test-50");
    `fingerprint` identifies the instances and the solver settings."""
    path = cache_dir() / f"{key}.json"
    values: list[float | None] = [None] * len(instances)
    if path.exists():
        try:
            stored = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"reference cache {path} is not valid JSON ({error}); delete it to recompute") from None
        if stored.get("fingerprint") == fingerprint and len(stored.get("values", [])) == len(instances):
            values = stored["values"]
    missing = [index for index, value in enumerate(values) if value is None]
    if missing:  # LKH on a large set takes hours: say so before the first solve, not after
        print(f"reference {key}: solving {len(missing)} of {len(instances)} instances, cached in {path.parent} as "
              "it goes (an interrupted solve keeps what it solved)", file=sys.stderr, flush=True)
    last_save = last_said = began = time.monotonic()
    dirty = False
    try:
        for done, index in enumerate(missing, start=1):
            values[index] = float(solve_one(instances[index]))
            dirty = True
            now = time.monotonic()
            if now - last_save > SAVE_EVERY_SECONDS:
                _save(path, fingerprint, values)
                last_save, dirty = now, False
            if now - last_said > SAY_EVERY_SECONDS and done < len(missing):
                left = (now - began) / done * (len(missing) - done)
                print(f"reference {key}: {done} of {len(missing)} solved, about {left / 60:.0f} min left",
                      file=sys.stderr, flush=True)
                last_said = now
    finally:  # Ctrl-C included: what was solved is kept
        if dirty:
            _save(path, fingerprint, values)
    return np.asarray(values, dtype=float)


def _save(path: Path, fingerprint: str, values: list[float | None]) -> None:
    atomic_write_json(path, {"fingerprint": fingerprint, "values": values}, indent=None)


LKH_SCALE = 1e6  # elkai wants integer distances; 1e6 keeps 6 decimals of a unit square
LKH_RUNS = 1


def lkh_tour_length(coords: np.ndarray, runs: int = LKH_RUNS) -> float:
    """Length of LKH-3's tour (via elkai) for points in the plane, measured in
    float distances. Best-known, not proven optimal."""
    import elkai  # imported here: only reference computation needs it

    coords = np.asarray(coords, dtype=float)
    n = len(coords)
    distances = np.linalg.norm(coords[:, None, :] - coords[None, :, :], axis=-1)
    if n <= 3:
        order = list(range(n))
    else:
        scaled = np.rint(distances * LKH_SCALE).astype(np.int64)
        order = elkai.DistanceMatrix(scaled.tolist()).solve_tsp(runs=runs)[:-1]
    tour = np.asarray(order)
    if sorted(order) != list(range(n)):
        raise RuntimeError(f"LKH returned a tour that is not a permutation of {n} nodes")
    return float(distances[tour, np.roll(tour, -1)].sum())


def knapsack_optimum(weights: np.ndarray, values: np.ndarray, capacity: float) -> float:
    """Exact 0-1 knapsack optimum with real-valued weights and values.

    Dynamic programming over items on the Pareto front of (weight, value)
    pairs (Nemhauser-Ullmann): after each item only states that no other state
    beats in both weight and value survive. No discretisation, so the result
    is exact; the front stays small (thousands of states) on random
    instances."""
    front_weight = np.zeros(1)
    front_value = np.zeros(1)
    for weight, value in zip(np.asarray(weights, float), np.asarray(values, float)):
        fits = front_weight + weight <= capacity
        cand_weight = np.concatenate([front_weight, front_weight[fits] + weight])
        cand_value = np.concatenate([front_value, front_value[fits] + value])
        # sort by weight, then by value descending; keep states whose value
        # beats every lighter state's
        order = np.lexsort((-cand_value, cand_weight))
        cand_weight, cand_value = cand_weight[order], cand_value[order]
        best_before = np.maximum.accumulate(cand_value)
        keep = np.ones(len(cand_value), dtype=bool)
        keep[1:] = cand_value[1:] > best_before[:-1]
        front_weight, front_value = cand_weight[keep], cand_value[keep]
    return float(front_value.max())


HGS_SCALE = 1e6  # PyVRP wants integer distances, as elkai does
HGS_ITERATIONS = 2000


def hgs_cvrp_cost(rows: np.ndarray, capacity: int, iterations: int = HGS_ITERATIONS, seed: int = 0) -> float:
    """Total route length of PyVRP's hybrid genetic search (HGS-CVRP) solution
    for rows of (demand, x, y) with the depot first, measured in float
    distances. Best-known, not proven optimal; deterministic for a seed and an
    iteration count (no time limit, so it does not depend on the machine).
    Distances are rounded to 1e-6 for the solver; the cost is its total."""
    from pyvrp import Model, PenaltyParams, SolveParams  # imported here: only references need it
    from pyvrp.stop import MaxIterations

    rows = np.asarray(rows, dtype=float)
    demands, coords = rows[:, 0], rows[:, 1:]
    distances = np.linalg.norm(coords[:, None, :] - coords[None, :, :], axis=-1)
    scaled = np.rint(distances * HGS_SCALE).astype(np.int64)
    model = Model()
    locations = [model.add_location(float(x), float(y)) for x, y in coords]
    depot = model.add_depot(locations[0])
    for location, demand in zip(locations[1:], demands[1:]):
        model.add_client(location, delivery=[int(round(demand))])
    model.add_vehicle_type(num_available=2 * len(rows), capacity=[int(capacity)], start_depot=depot, end_depot=depot)
    for i, frm in enumerate(locations):
        for j, to in enumerate(locations):
            model.add_edge(frm, to, distance=int(scaled[i, j]))
    result = model.solve(stop=MaxIterations(iterations), seed=seed, display=False, collect_stats=False)
    if not result.is_feasible():
        # Distances in micro-units make one unit of excess load cheap next to them and PyVRP
        # caps its load penalty at 1e5: on tight instances let the penalty grow further.
        # (Not the first choice: it searched worse where the default already succeeds.)
        params = SolveParams(penalty=PenaltyParams(max_penalty=1e12))
        result = model.solve(stop=MaxIterations(iterations), seed=seed, display=False, collect_stats=False,
                             params=params)
    if not result.is_feasible():
        raise RuntimeError("PyVRP found no feasible CVRP solution")
    # rounding to 1e-6 per edge moves a 100-customer total by at most ~1e-4
    return float(result.best.distance()) / HGS_SCALE
