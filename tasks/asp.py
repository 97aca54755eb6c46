"""Admissible sets (FunSearch): evolve `priority(el, n, w)`, which ranks the
candidate vectors of FunSearch's symmetric greedy construction of a
constant-weight admissible set A(n, w). The score is the size of the set
built (higher is better).

The construction follows FunSearch's `admissible_set` notebook as used by
the Agentic-ESOpt reference: vectors in {0,1,2}^n are split into n/3 groups
of three coordinates; each group takes one of 7 triple patterns; a
pre-admissible row of patterns expands to every cyclic rotation of its
groups. Rows are picked greedily by priority among those still compatible
with every row picked so far. The compatibility test is vectorised here
(one numpy pass per pick) instead of the reference's Python loops; the picks
and the result are the same.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import InvalidSolution, Reference, call_budget, check_array, described_once

TRIPLES = [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 2), (0, 2, 1), (1, 1, 1), (2, 2, 2)]
PATTERN_WEIGHT = np.array([0, 1, 1, 2, 2, 3, 3])  # non-zero entries of each triple
PATTERN_ONES = np.array([0, 1, 0, 1, 1, 3, 0])  # entries equal to 1 in each triple
ROTATIONS = np.array([1, 3, 3, 3, 3, 1, 1])  # distinct cyclic rotations of each triple
# FunSearch's 35 forbidden sorted pattern triples (in pattern indices 0..6).
FORBIDDEN = [
    (0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3), (0, 4, 4), (0, 5, 5), (0, 6, 6),
    (1, 1, 1), (1, 1, 2), (1, 2, 2), (1, 2, 3), (1, 2, 4), (1, 3, 3), (1, 4, 4),
    (1, 5, 5), (1, 6, 6), (2, 2, 2), (2, 3, 3), (2, 4, 4), (2, 5, 5), (2, 6, 6),
    (3, 3, 3), (3, 3, 4), (3, 4, 4), (3, 4, 5), (3, 4, 6), (3, 5, 5), (3, 6, 6),
    (4, 4, 4), (4, 5, 5), (4, 6, 6), (5, 5, 5), (5, 5, 6), (5, 6, 6), (6, 6, 6),
]
FORBIDDEN_TABLE = np.zeros((7, 7, 7), dtype=bool)
for _triple in FORBIDDEN:
    for _a, _b, _c in itertools.permutations(_triple):
        FORBIDDEN_TABLE[_a, _b, _c] = True

# Test sizes n -> w (the paper's Table 5 settings); the train set is (15, 10).
WEIGHTS = {12: 7, 15: 10, 21: 15}
# Largest admissible sets FunSearch published (Romera-Paredes et al., Nature 2024),
# checked against the sets themselves in google-deepmind/funsearch,
# admissible_set/admissible_set_n{12_w7_size792, 15_w10_size3003, 21_w15_size43596}.txt:
# each file holds exactly that many vectors (792 x 37, 3003 x 46 and 43596 x 64
# characters, one "[d, d, ...]" line per vector). C(n, w) is the trivial upper
# bound; (12, 7) and (15, 10) reach it, (21, 15) does not (C(21, 15) = 54264).
BEST_KNOWN = {12: 792, 15: 3003, 21: 43596}
CHUNK = 20_000_000  # booleans per compatibility pass, to bound memory

TEMPLATE = '''import numpy as np


def priority(el, n, w):
    """Score a candidate vector for a greedy admissible-set construction.

    Args:
        el: tuple of n ints, each 0, 1 or 2, with exactly w non-zero entries
            (the candidate vector in {0,1,2}^n).
        n: int, length of the vectors.
        w: int, number of non-zero entries per vector.

    Returns:
        float: priority; candidates with higher priority are added first.
    """
    # Baseline: prefer vectors whose non-zero entries are mostly 1s.
    return float(sum(1 for x in el if x == 1))
'''

# The reference's seed function (data/ahd/settings/prompts/asp_constructive/seed_func.txt
# of zz1358m/Agentic-ESOpt: `return 1`), with our signature and docstring: every
# candidate ties, so the greedy keeps the construction's own order (1842 on (15, 10)).
REFERENCE_SEED = TEMPLATE.split("    # Baseline:")[0] + "    # The reference's seed: every candidate has the same priority.\n    return 1.0\n"


def as_priority(value: Any) -> float:
    """A priority must be one real, non-NaN number."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if value is None or isinstance(value, (str, bytes)) or not isinstance(value, (Real, np.number)):
        raise InvalidSolution(f"priority returned {type(value).__name__}, expected a float")
    if isinstance(value, (complex, np.complexfloating)):
        raise InvalidSolution("priority returned a complex number, expected a float")
    number = float(value)
    if math.isnan(number):
        raise InvalidSolution("priority returned NaN")
    return number


@functools.lru_cache(maxsize=8)
def candidate_rows(n: int, w: int) -> np.ndarray:
    """All rows of triple patterns of total weight w, in the reference's order."""
    if n % 3 or n <= 0:
        raise ValueError(f"n must be a positive multiple of 3, got {n}")
    groups = n // 3
    rows = np.array(list(itertools.product(range(7), repeat=groups)), dtype=np.int8)
    rows = rows[PATTERN_WEIGHT[rows].sum(axis=1) == w]
    rows.setflags(write=False)  # cached and shared
    return rows


def priorities(fn: Callable[..., Any], rows: np.ndarray, n: int, w: int) -> np.ndarray:
    """`fn`'s priority of every candidate row (untrusted side)."""
    return np.array([as_priority(fn(sum((TRIPLES[p] for p in row), ()), n, w)) for row in rows.tolist()],
                    dtype=float)


def admissible_set_size(fn: Callable[..., Any], n: int, w: int) -> int:
    """Size of the admissible set that the greedy construction builds with `fn`."""
    return greedy_size(priorities(fn, candidate_rows(n, w), n, w), n, w)


def greedy_size(scores: Any, n: int, w: int) -> int:
    """Size of the set the greedy construction builds when it takes the rows
    of candidate_rows(n, w) in the order of `scores` (trusted side)."""
    rows = candidate_rows(n, w)
    scores = check_array(scores, "f", (len(rows),), "the priorities")
    if np.isnan(scores).any():
        raise InvalidSolution("priority returned NaN")
    weights = PATTERN_WEIGHT[rows]
    picked: list[np.ndarray] = []
    size = 0
    while len(rows):
        best = int(np.argmax(scores))
        new = rows[best]
        picked_array = np.array(picked, dtype=np.int8).reshape(len(picked), rows.shape[1])
        new_weight = weights[best]
        comparable = (weights >= new_weight).all(axis=1) | (weights <= new_weight).all(axis=1)
        survive = ~comparable & ~_completes_forbidden(picked_array, new, rows)
        picked.append(new)
        size += int(np.prod(ROTATIONS[new]))
        rows, scores, weights = rows[survive], scores[survive], weights[survive]
    return size


def _completes_forbidden(picked: np.ndarray, new: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each row: does (some picked row, new, row) forbid it in every group?"""
    killed = np.zeros(len(rows), dtype=bool)
    if not len(picked) or not len(rows):
        return killed
    step = max(1, CHUNK // (len(rows) * rows.shape[1]))
    for start in range(0, len(picked), step):
        block = picked[start : start + step]
        table = FORBIDDEN_TABLE[block[:, None, :], new[None, None, :], rows[None, :, :]]
        killed |= table.all(axis=2).any(axis=0)
    return killed


@dataclass(frozen=True)
class Setting:
    """An ASP "instance set" is one (n, w) pair: the construction is deterministic."""

    n: int
    w: int


class AdmissibleSets:
    name = "asp"
    description = (
        "Admissible sets (FunSearch): build a large set of vectors in {0,1,2}^n with exactly w non-zero "
        "entries that satisfies the admissible-set conditions. A greedy construction adds candidate "
        "vectors in order of priority(el, n, w), skipping any that conflict with those already added. "
        "Design the priority; the score is the size of the set built for n=15, w=10 (higher is better)."
    )
    function_name = "priority"
    template = TEMPLATE
    reference_seed = REFERENCE_SEED  # start.program = "reference" (the paper presets)
    direction = "max"
    train = ("train", 15)

    def splits(self) -> dict[str, list[int]]:
        return {"train": [15], "test": sorted(WEIGHTS)}

    def instances(self, split: str, size: int) -> Setting:
        if size not in self.splits().get(split, []):
            raise KeyError(f"no instance set {split}{size} (available: {self.splits()})")
        return Setting(size, WEIGHTS[size])

    def decide(self, fn: Callable[..., Any], instances: Setting) -> Iterator[np.ndarray]:
        yield priorities(fn, candidate_rows(instances.n, instances.w), instances.n, instances.w)

    def score(self, decisions: list[Any], instances: Setting) -> float:
        (scores,) = decisions
        return float(greedy_size(scores, instances.n, instances.w))

    # behaviour descriptors of the priorities (MAP-Elites' grid may use them; tasks/base.py behaviour_of):
    # `tied`, the share of candidate rows whose priority another row has too (the construction's own
    # order then decides between them: the template's 11 values tie every row, a continuous score none);
    # `ones`, the share of 1s among the non-zero entries of the tenth of rows it ranks first
    decision_descriptors = {"tied": (0.0, 1.0), "ones": (0.0, 1.0)}

    @described_once
    def describe_decisions(self, decisions: list[Any], instances: Setting) -> dict[str, float]:
        """Trusted side, on priorities score() accepted."""
        (scores,) = decisions
        scores = np.asarray(scores, dtype=float)
        _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
        rows = candidate_rows(instances.n, instances.w)
        first = np.argsort(-scores, kind="stable")[: max(1, len(rows) // 10)]  # the greedy's first picks
        return {"tied": float((counts[inverse] > 1).mean()),
                "ones": float(PATTERN_ONES[rows[first]].sum() / (len(first) * instances.w))}

    def feedback(self, decisions: list[Any], instances: Setting) -> str:
        """Trusted side, on priorities score() accepted: what the proposer reads under the program."""
        seen = self.describe_decisions(decisions, instances)
        distinct = len(np.unique(np.asarray(decisions[0], dtype=float)))
        return (f"its priorities tie for {seen['tied']:.0%} of the {len(decisions[0])} candidate rows "
                f"({distinct} distinct value{'s' * (distinct != 1)}; the construction's order breaks ties); the "
                f"tenth it ranks first holds {seen['ones']:.0%} 1s, {1 - seen['ones']:.0%} 2s among its non-zero "
                "entries")

    def decision_bytes(self, size: int) -> int:
        """One priority (8 bytes) per candidate row: at most 7 ** (n / 3) rows."""
        return 8 * 7 ** (size // 3) + 4096

    def instance_seconds(self, size: int) -> float:
        # one "instance": a call per candidate row, after enumerating the rows
        return call_budget(len(candidate_rows(size, WEIGHTS[size])), 2e-3, base_s=30.0)

    def reference(self, split: str, size: int) -> Reference | None:
        n, w = self.instances(split, size).n, self.instances(split, size).w
        if n in BEST_KNOWN:
            return Reference(float(BEST_KNOWN[n]), "best-known",
                             "FunSearch's published sets (Romera-Paredes et al. 2024; sizes checked)")
        return Reference(float(math.comb(n, w)), "bound", "C(n, w) bound")
