"""Statistics of a comparison: mean ± std over seeds, the paper's gain Δ
(and the share of the gap closed), and best-so-far bands over seeds. Pure functions on plain
numbers, so each is checked against hand-computed answers (tests/test_stats.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence


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


def paper_delta(base_gap: float | None, variant_gap: float | None) -> float | None:
    """The paper's Δ (§6): g(b) / g(m) − 1 for a method m against its matched
    baseline b, on gaps g(x) = |x − x*| / |x*|. 0.2296 = the baseline's gap is
    22.96% larger; negative when the method is worse. Undefined without both
    gaps, and when either is ≤ 0: an arm at or beyond the reference (a task
    whose reference is a heuristic can be beaten) leaves a ratio of gaps with
    no sign to read (gaps 0.02 and −0.01 would give −3.0, "far worse", for the
    better method)."""
    if base_gap is None or variant_gap is None or base_gap <= 0 or variant_gap <= 0:
        return None
    return base_gap / variant_gap - 1


def gap_closed(base_gap: float | None, variant_gap: float | None) -> float | None:
    """(g(b) − g(m)) / g(b): the share of the baseline's gap the method
    closes (0.25 = a quarter; negative when worse; above 1 when the method goes
    beyond the reference). Not the paper's Δ; kept because it stays defined when
    the method reaches the reference. Undefined without both gaps or when the
    baseline is at or beyond the reference (g(b) ≤ 0: dividing by it flips the sign)."""
    if base_gap is None or variant_gap is None or base_gap <= 0:
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


# ------------------------------------------------ two arms' mean test objectives

def t95(df: float) -> float:
    """Two-sided 95% quantile of Student's t with `df` degrees of freedom: the table below at the
    whole df at or under it (a little wide, never narrow); above 30, 1.96 + 2.46 / df, within 0.001
    of the exact quantile there."""
    if df < 1:
        raise ValueError(f"t95 needs df >= 1, got {df}")
    if df > 30:
        return 1.96 + 2.46 / df
    return _T95[int(df)]


@dataclass(frozen=True)
class Difference:
    """The variant's mean minus the base's, with a two-sided 95% Welch interval."""

    difference: float
    low: float
    high: float
    df: float | None  # Welch-Satterthwaite; None when neither arm varies (the interval is the point)

    @property
    def distinct(self) -> bool:
        """The interval excludes 0: the arms can be told apart at this size."""
        return self.low > 0 or self.high < 0


def welch_difference(base: Summary, variant: Summary) -> Difference | None:
    """Welch's interval for the difference of two arms' means over seeds (unequal spreads, no pairing:
    two methods' runs on one seed share no randomness worth pairing on); None when an arm has fewer
    than two values."""
    if base.std is None or variant.std is None or base.mean is None or variant.mean is None:
        return None
    difference = variant.mean - base.mean
    share_a, share_b = base.std ** 2 / base.n, variant.std ** 2 / variant.n
    if share_a + share_b == 0:
        return Difference(difference, difference, difference, None)
    df = (share_a + share_b) ** 2 / (share_a ** 2 / (base.n - 1) + share_b ** 2 / (variant.n - 1))
    half = t95(df) * math.sqrt(share_a + share_b)
    return Difference(difference, difference - half, difference + half, df)


def proportion_difference(hits_a: int, n_a: int, hits_b: int, n_b: int) -> Difference | None:
    """B's success rate minus A's with Agresti and Caffo's 95% interval: one success and one failure
    added to each arm, then the normal interval. Unlike Welch's on 0/1 outcomes it stays honest when an
    arm's outcomes are all equal (2 of 2 against 0 of 2 cannot be told apart). The point is the
    difference of the adjusted rates, (hits + 1) / (n + 2). None when an arm is empty."""
    if n_a < 1 or n_b < 1:
        return None
    rate_a, rate_b = (hits_a + 1) / (n_a + 2), (hits_b + 1) / (n_b + 2)
    half = 1.96 * math.sqrt(rate_a * (1 - rate_a) / (n_a + 2) + rate_b * (1 - rate_b) / (n_b + 2))
    return Difference(rate_b - rate_a, rate_b - rate_a - half, rate_b - rate_a + half, None)


def sign_test(better: int, worse: int) -> float:
    """Two-sided exact sign test: the chance, were neither direction likelier, of a split of the
    changed problems at least as lopsided as `better` against `worse` (ties left out). Paired
    before/after scores on the same problems (an agent run's held-out rounds) need no variance
    estimate this way, so a few problems that all moved one way are not overclaimed: 2 of 2 gives
    0.5, and only 6 of 6 falls under 0.05."""
    changed = better + worse
    if changed == 0:
        return 1.0
    tail = sum(math.comb(changed, i) for i in range(min(better, worse) + 1)) / 2 ** changed
    return min(1.0, 2 * tail)


def problem_means(scores: Iterable[tuple[str, float]]) -> dict[str, float]:
    """(problem, score) pairs, several attempts of a problem among them, as each problem's mean score:
    what paired_change pairs."""
    per_problem: dict[str, list[float]] = {}
    for problem, score in scores:
        per_problem.setdefault(problem, []).append(score)
    return {problem: sum(v) / len(v) for problem, v in per_problem.items()}


def paired_change(before: dict[str, float], after: dict[str, float]) -> dict[str, Any] | None:
    """Scores on the same problems twice (problem -> score; problems in only one left out): how many
    got better, how many worse, the mean change and the sign test's p. None when none is shared."""
    shared = [problem for problem in before if problem in after]
    if not shared:
        return None
    changes = [after[problem] - before[problem] for problem in shared]
    better, worse = sum(c > 0 for c in changes), sum(c < 0 for c in changes)
    return {"cases": len(shared), "better": better, "worse": worse, "change": sum(changes) / len(shared),
            "p": sign_test(better, worse)}


Z80 = 0.8416  # the normal quantile of 80% power
MOST_SEEDS = 10_000


def seeds_needed(difference: float, std_a: float, std_b: float) -> int | None:
    """Seeds per arm at which Welch's test at 5% (two-sided) finds a true difference of this size
    with 80% power, if the arms' spreads stay as measured: the least n with
    |d| / sqrt((s_a² + s_b²) / n) >= t95(df(n)) + z_0.8. None for no difference, or one that would
    take more than MOST_SEEDS."""
    if difference == 0:
        return None
    spread = std_a ** 2 + std_b ** 2
    if spread == 0:
        return 2
    for n in range(2, MOST_SEEDS + 1):
        df = (n - 1) * spread ** 2 / (std_a ** 4 + std_b ** 4)
        if abs(difference) / math.sqrt(spread / n) >= t95(max(df, 1.0)) + Z80:
            return n
    return None


# ------------------------------------------------ agent evaluation (Mean@k / Pass@k)

# two-sided 95% Student t quantiles by degrees of freedom (t95 goes on above 30)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
        18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
        26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}


@dataclass(frozen=True)
class Interval:
    """A mean with its two-sided 95% confidence interval over problems."""

    n: int
    mean: float
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "low": self.low, "high": self.high}

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def mean_interval(values: Sequence[float]) -> Interval:
    """Mean of per-problem scores with a 95% Student-t interval, clipped to
    [0, 1] (scores are rates). Problems are the unit of sampling: the k
    attempts of one problem are not independent draws of the test set.
    Every problem 0 (or every one 1): the exact binomial bound instead."""
    kept = [float(v) for v in values]
    if not kept:
        raise ValueError("mean_interval of no values")
    stats = summarise(kept)
    mean = stats.mean
    if stats.std is None:  # one problem: no spread to speak of, the interval is everything
        return Interval(1, mean, 0.0, 1.0)
    if stats.std == 0 and mean in (0.0, 1.0):
        return _all_equal_interval(stats.n, mean)
    half = t95(stats.n - 1) * stats.std / math.sqrt(stats.n)
    return Interval(stats.n, mean, max(0.0, mean - half), min(1.0, mean + half))


def _all_equal_interval(n: int, mean: float) -> Interval:
    """Every one of n problems scored 0 (or every one 1): Student-t's zero spread would print [0, 0], a
    certainty n problems cannot give. The exact (Clopper-Pearson) 95% bound of 0 successes in n instead:
    the rate at which all n fail with chance 2.5%, 1 - 0.025^(1/n) (0.31 for n = 10); mirrored for all 1."""
    bound = 1.0 - 0.025 ** (1.0 / n)
    return Interval(n, mean, 0.0, bound) if mean == 0.0 else Interval(n, mean, 1.0 - bound, 1.0)


def mean_at_k(attempts: Sequence[Sequence[float]]) -> Interval:
    """Mean@k: each problem scores the mean of its k attempts' rewards; the
    estimate is their mean over problems, with its interval."""
    _check_attempts(attempts)
    return mean_interval([math.fsum(a) / len(a) for a in attempts])


def pass_at_k(attempts: Sequence[Sequence[float]]) -> Interval:
    """Pass@k: a problem scores 1 when any of its k attempts solved it (reward >= 1)."""
    _check_attempts(attempts)
    return mean_interval([1.0 if any(r >= 1.0 for r in a) else 0.0 for a in attempts])


def max_at_k(attempts: Sequence[Sequence[float]]) -> Interval:
    """Max@k: a problem scores the best of its k attempts' rewards (for graded
    rewards such as ANLS; with 0/1 rewards it equals Pass@k)."""
    _check_attempts(attempts)
    return mean_interval([max(a) for a in attempts])


def best_of_k(attempts: Sequence[Sequence[float]], k: int) -> Interval:
    """Best-of-k estimated from n >= k attempts per problem: the expected best
    reward of k attempts drawn without replacement from the n, i.e. with the
    rewards sorted ascending r_1 <= ... <= r_n, Σ_i r_i C(i−1, k−1) / C(n, k)
    (with 0/1 rewards, the unbiased pass@k estimator 1 − C(n−c, k)/C(n, k));
    k = n is Max@n."""
    _check_attempts(attempts)
    n = len(attempts[0])
    if not 1 <= k <= n:
        raise ValueError(f"best-of-k needs 1 <= k <= {n} (the attempts per problem), got {k}")
    total = math.comb(n, k)
    return mean_interval([math.fsum(r * math.comb(i, k - 1) for i, r in enumerate(sorted(a))) / total
                          for a in attempts])


def _check_attempts(attempts: Sequence[Sequence[float]]) -> None:
    if not attempts:
        raise ValueError("no problems to score")
    sizes = {len(a) for a in attempts}
    if 0 in sizes or len(sizes) != 1:
        raise ValueError(f"every problem needs the same number k >= 1 of attempts, got {sorted(sizes)}")
