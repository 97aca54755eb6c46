"""Statistics of a comparison: mean ± std over seeds, the relative gap
reduction Δ, and best-so-far bands over seeds. Pure functions on plain
numbers, so each is checked against hand-computed answers (tests/test_stats.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation (ddof = 1) of the values that exist."""

    n: int
    mean: float | None
    std: float | None  # None below two values: one seed says nothing about spread

    def to_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "std": self.std}


def summarise(values: Sequence[float | None]) -> Summary:
    """Mean ± sample std of the finite values; None and NaN (a run with no
    valid heuristic) are left out and show up as a smaller `n`."""
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return Summary(0, None, None)
    mean = math.fsum(kept) / len(kept)
    if len(kept) < 2:
        return Summary(len(kept), mean, None)
    variance = math.fsum((v - mean) ** 2 for v in kept) / (len(kept) - 1)
    return Summary(len(kept), mean, math.sqrt(variance))


def gap_reduction(base_gap: float | None, variant_gap: float | None) -> float | None:
    """Δ = (gap_base − gap_variant) / gap_base: the share of the base method's
    gap to the reference that the variant closes (0.25 = a quarter of it;
    negative when the variant is worse). Undefined without both gaps or when
    the base already sits on the reference."""
    if base_gap is None or variant_gap is None or base_gap == 0:
        return None
    return (base_gap - variant_gap) / base_gap


def step_value(curve: Sequence[Sequence[float]], x: float) -> float | None:
    """Value at evaluation `x` of a best-so-far step curve [(evaluation, value), ...]
    sorted by evaluation; None before its first point."""
    value = None
    for evaluation, y in curve:
        if evaluation > x:
            break
        value = y
    return value


@dataclass(frozen=True)
class Band:
    """Mean and spread of several best-so-far curves, as a step function: one
    point where any of them changes. At each x only the curves that have
    started count; `runs` says how many did."""

    xs: list[int]
    mean: list[float]
    low: list[float]  # mean − std (the mean itself where one curve counts)
    high: list[float]
    runs: list[int]


def band(curves: Sequence[Sequence[Sequence[float]]], budget: int) -> Band:
    """Mean ± sample std over seeds of best-so-far curves, over evaluations
    1..budget from the first at which some curve has a value."""
    xs: list[int] = []
    means: list[float] = []
    lows: list[float] = []
    highs: list[float] = []
    runs: list[int] = []
    for x in range(1, budget + 1):
        stats = summarise([step_value(curve, x) for curve in curves])
        if stats.mean is None:
            continue
        spread = stats.std or 0.0
        if xs and (means[-1], runs[-1], highs[-1]) == (stats.mean, stats.n, stats.mean + spread):
            continue  # nothing changed: the step goes on
        xs.append(x)
        means.append(stats.mean)
        lows.append(stats.mean - spread)
        highs.append(stats.mean + spread)
        runs.append(stats.n)
    return Band(xs, means, lows, highs, runs)
