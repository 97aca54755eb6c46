"""Constructive 0-1 knapsack: evolve `select_next_item`, the step rule of a
greedy packer (same instances and calling convention as the Agentic-ESOpt
reference code)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from tasks.base import (DESCRIBED_INSTANCES, Draw, InvalidSolution, Reference, SeededSets, as_index, call_budget,
                        check_array, described_once, draws_of, unit_square)
from tasks.references import cached_values, checksum, knapsack_optimum

# The reference's capacities: 12.5 for 50 items, 25 otherwise.
CAPACITY = {50: 12.5, 100: 25.0, 200: 25.0}
TOLERANCE = 1e-12  # the reference's slack when comparing weight and capacity

TEMPLATE = '''import numpy as np


def select_next_item(remaining_capacity, weights, values):
    """Choose the next item to put in a 0-1 knapsack under construction.

    Args:
        remaining_capacity: float, capacity left in the knapsack.
        weights: 1-D numpy float array, weights of the items not yet packed.
        values: 1-D numpy float array, values of the same items.

    Returns:
        int: index (into weights/values) of the item to pack next, or None
        to stop. Packing stops too when the chosen item does not fit.
    """
    # Baseline: the best value/weight ratio among the items that still fit.
    ratio = np.where(weights <= remaining_capacity, values / weights, -np.inf)
    best = int(np.argmax(ratio))
    if ratio[best] == -np.inf:
        return None
    return best
'''


def packing_value(picks: Any, items: np.ndarray, capacity: float) -> float:
    """Total value of packing `picks` (item indices, in packing order),
    checked: distinct items, each fitting when it is packed. Sums in packing
    order, as the packing loop does, so the value is the same to the bit."""
    picks = check_array(picks, "i", (len(picks),) if isinstance(picks, np.ndarray) else (0,), "the packing")
    if picks.ndim != 1 or len(picks) > len(items):
        raise InvalidSolution(f"the packing lists {len(picks)} items, the instance has {len(items)}")
    if len(picks) and (picks.min() < 0 or picks.max() >= len(items) or len(np.unique(picks)) != len(picks)):
        raise InvalidSolution("the packing repeats an item or names one that does not exist")
    weights = np.array(items[:, 0], dtype=float)
    values = np.array(items[:, 1], dtype=float)
    remaining = float(capacity)
    total = 0.0
    for step, index in enumerate(picks.tolist()):
        if weights[index] > remaining + TOLERANCE:
            raise InvalidSolution(f"item {index} (packed {step + 1}th) does not fit")
        total += values[index]
        remaining -= weights[index]
    return total


def best_ratio_share(picks: np.ndarray, items: np.ndarray, capacity: float) -> float | None:
    """The share of a packing's picks that took the best value/weight ratio among the unpacked items
    that fit then (1.0 for the ratio-greedy template); None for an empty packing. One (picks, n) table."""
    if not len(picks):
        return None
    weights, values = items[:, 0], items[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):  # a weightless item: an infinite ratio, best of all
        ratio = values / weights
    packed_at = np.full(len(items), len(picks))
    packed_at[picks] = np.arange(len(picks))
    left = capacity - np.concatenate([[0.0], np.cumsum(weights[picks])[:-1]])  # capacity before each pick
    open_ = (packed_at[None, :] >= np.arange(len(picks))[:, None]) & (weights[None, :] <= left[:, None] + TOLERANCE)
    best = np.where(open_, ratio, -np.inf).max(axis=1)
    return float(np.mean(ratio[picks] >= best))


def _kp_draws() -> list[Draw]:
    # as the paper's code (zz1358m/Agentic-ESOpt): np.random.seed(3333), train100, val 50/100/200,
    # test 50/100/200;
    # columns are (weight, value).
    return draws_of(unit_square, [("train", 64, (100,)), ("val", 64, (50, 100, 200)), ("test", 1000, (50, 100, 200))])


class KPConstruct:
    name = "kp_construct"
    description = (
        "0-1 Knapsack Problem: choose items, each at most once, to maximise total value without "
        "exceeding the knapsack's weight capacity. Items are packed one at a time: select_next_item "
        "sees the remaining capacity and the weights and values of the items not yet packed, and "
        "returns the index of the next one. The score is the mean total value (higher is better)."
    )
    function_name = "select_next_item"
    template = TEMPLATE
    direction = "max"
    train = ("train", 100)
    capacities = CAPACITY  # by item count (Table 5: KP50 W 12.5, KP100 W 25)

    def __init__(self) -> None:
        self._sets = SeededSets(3333, _kp_draws())

    def splits(self) -> dict[str, list[int]]:
        return self._sets.splits()

    def instances(self, split: str, size: int) -> np.ndarray:
        """(count, size, 2) items as (weight, value) in [0, 1)."""
        return self._sets.get(split, size)

    def decide(self, fn: Callable[..., Any], instances: np.ndarray) -> Iterator[np.ndarray]:
        capacity = CAPACITY[instances.shape[1]]
        for items in instances:
            yield self.picks(fn, items, capacity)

    # score() is by definition the mean of instance_scores(): the sandbox computes the profile once and
    # takes its mean as the objective, without calling score() (tasks/base.py)
    score_is_instance_mean = True

    def score(self, decisions: list[Any], instances: np.ndarray) -> float:
        return float(np.mean(self.instance_scores(decisions, instances)))

    def instance_scores(self, decisions: list[Any], instances: np.ndarray) -> list[float]:
        capacity = CAPACITY[instances.shape[1]]
        return [packing_value(picks, items, capacity) for picks, items in zip(decisions, instances)]

    # behaviour descriptors of the packings (MAP-Elites' grid may use them; tasks/base.py behaviour_of):
    # `best_ratio`, how often a pick was the ratio-greedy one; `fill`, the share of the capacity packed
    # (0.986 to 0.999 on train100 for simple rules: the range is that narrow end)
    decision_descriptors = {"best_ratio": (0.0, 1.0), "fill": (0.97, 1.0)}

    @described_once
    def describe_decisions(self, decisions: list[Any], instances: np.ndarray) -> dict[str, float]:
        """Trusted side, on packings score() accepted: each descriptor's mean over the (first 64) instances."""
        capacity = CAPACITY[instances.shape[1]]
        shares, fills = [], []
        for picks, items in zip(decisions[:DESCRIBED_INSTANCES], instances[:DESCRIBED_INSTANCES]):
            picks = np.asarray(picks, dtype=np.int64)
            share = best_ratio_share(picks, items, capacity)
            if share is not None:
                shares.append(share)
            fills.append(float(items[picks, 0].sum()) / capacity)
        return {"fill": float(np.mean(fills)), **({"best_ratio": float(np.mean(shares))} if shares else {})}

    def feedback(self, decisions: list[Any], instances: np.ndarray) -> str:
        """Trusted side, on packings score() accepted: what the proposer reads under the program."""
        seen = self.describe_decisions(decisions, instances)
        note = f"its packings fill {seen['fill']:.1%} of the capacity on average"
        if "best_ratio" in seen:
            note += f"; {seen['best_ratio']:.0%} of its picks took the best value/weight ratio of the items that fit"
        return note

    def instance_seconds(self, size: int) -> float:
        # at most n calls, each over the remaining items (O(n))
        return call_budget(size, 0.02 + 2e-5 * size)

    def packed_value(self, fn: Callable[..., Any], items: np.ndarray, capacity: float) -> float:
        """Pack one knapsack with `fn` and return the packed value."""
        return packing_value(self.picks(fn, items, capacity), items, capacity)

    def picks(self, fn: Callable[..., Any], items: np.ndarray, capacity: float) -> np.ndarray:
        """The reference's packing loop: the items `fn` packs, as indices into
        `items`, in packing order."""
        weights = np.array(items[:, 0], dtype=float)
        values = np.array(items[:, 1], dtype=float)
        original = np.arange(len(items))
        remaining = float(capacity)
        packed = []
        while weights.size and remaining + TOLERANCE >= weights.min():
            # copies: a heuristic that edits its arguments must not edit our state
            choice = fn(remaining, weights.copy(), values.copy())
            if choice is None:
                break
            index = as_index(choice, weights.size, "item")
            if weights[index] > remaining + TOLERANCE:
                break  # a pick that does not fit ends the packing, as in the paper's code
            packed.append(original[index])
            remaining -= weights[index]
            weights = np.delete(weights, index)
            values = np.delete(values, index)
            original = np.delete(original, index)
        return np.asarray(packed, dtype=np.int64)

    def reference(self, split: str, size: int) -> Reference | None:
        instances = self.instances(split, size)
        capacity = CAPACITY[size]
        values = cached_values(
            f"{self.name}-{split}-{size}",
            instances,
            lambda items: knapsack_optimum(items[:, 0], items[:, 1], capacity),
            f"{checksum(instances)}-dp",
        )
        return Reference(float(values.mean()), "exact", "dynamic programming over the Pareto front")
