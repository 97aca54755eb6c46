"""coevolve.stats on inputs whose answers are worked out by hand."""

from __future__ import annotations

import math

import pytest

from coevolve.stats import band, gap_closed, paper_delta, step_value, summarise


def test_mean_and_sample_std():
    s = summarise([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert s.n == 8 and s.mean == 5.0
    assert s.std == pytest.approx(math.sqrt(32 / 7))  # squared deviations sum to 32, ddof = 1


def test_missing_values_are_left_out_and_counted():
    s = summarise([1.0, None, 3.0, float("nan")])
    assert (s.n, s.mean, s.std) == (2, 2.0, pytest.approx(math.sqrt(2)))
    assert summarise([None, None]).to_dict() == {"n": 0, "mean": None, "std": None}
    one = summarise([6.5])
    assert (one.n, one.mean, one.std) == (1, 6.5, None)  # one seed: no spread


def test_paper_delta_reproduces_table5():
    """Table 5, TSP20, T = 1000: Sample 4.3286, Sample+ESOpt 4.2336, Optimal row
    x* = 3.8199, and the Δ the table prints, 22.96%. From the objectives alone:
    gaps |x − x*| / x*, then Δ = g(b)/g(m) − 1. (The share of the gap closed,
    our former Δ, would be 18.7% here.)"""
    optimum, base, variant = 3.8199, 4.3286, 4.2336
    g_b, g_m = abs(base - optimum) / optimum, abs(variant - optimum) / optimum
    assert round(100 * paper_delta(g_b, g_m), 2) == 22.96
    assert 100 * gap_closed(g_b, g_m) == pytest.approx(18.67, abs=0.02)
    # by hand for TSP20: g(b) = 0.50870 / 3.8199 = 0.133171, g(m) = 0.41370 / 3.8199 = 0.108301
    assert paper_delta(0.133171, 0.108301) == pytest.approx(0.22964, abs=1e-4)
    assert paper_delta(0.10, 0.12) == pytest.approx(0.10 / 0.12 - 1)  # the method is worse: negative
    assert paper_delta(0.1, 0.0) is None and paper_delta(None, 0.1) is None and paper_delta(0.1, None) is None


def test_gap_closed():
    assert gap_closed(0.10, 0.075) == pytest.approx(0.25)
    assert gap_closed(0.10, 0.12) == pytest.approx(-0.2)  # the variant is worse
    assert gap_closed(0.0, 0.01) is None
    assert gap_closed(None, 0.01) is None and gap_closed(0.1, None) is None


def test_step_value():
    curve = [(3, 10.0), (5, 8.0)]
    assert [step_value(curve, x) for x in range(1, 7)] == [None, None, 10.0, 10.0, 8.0, 8.0]


def test_band_of_two_curves():
    a = [(1, 10.0), (4, 6.0)]
    b = [(2, 8.0), (3, 4.0)]
    result = band([a, b], budget=5)
    # x=1: only a (10); x=2: 10, 8; x=3: 10, 4; x=4..5: 6, 4
    assert result.xs == [1, 2, 3, 4]
    assert result.mean == [10.0, 9.0, 7.0, 5.0]
    assert result.runs == [1, 2, 2, 2]
    std = [0.0, math.sqrt(2), math.sqrt(18), math.sqrt(2)]
    assert result.low == pytest.approx([m - s for m, s in zip(result.mean, std)])
    assert result.high == pytest.approx([m + s for m, s in zip(result.mean, std)])


def test_band_of_no_valid_runs_is_empty():
    assert band([[], []], budget=10).xs == []


def test_mean_and_pass_at_k_by_hand():
    from coevolve.stats import mean_at_k, pass_at_k

    attempts = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    m = mean_at_k(attempts)
    assert m.n == 3 and m.mean == pytest.approx(5 / 12)
    # per-problem means 0.25, 1, 0: sample std sqrt(((1/6)^2 + (7/12)^2 + (5/12)^2) / 2); t(2) = 4.303
    std = math.sqrt(((0.25 - 5 / 12) ** 2 + (1 - 5 / 12) ** 2 + (5 / 12) ** 2) / 2)
    assert m.high == pytest.approx(min(1.0, 5 / 12 + 4.303 * std / math.sqrt(3)))
    assert m.low == 0.0  # clipped: a rate is never below 0
    p = pass_at_k(attempts)
    assert p.mean == pytest.approx(2 / 3)


def test_interval_narrows_with_more_problems_and_rejects_ragged_attempts():
    from coevolve.stats import mean_at_k

    small = mean_at_k([[1, 0]] * 2 + [[0, 0]] * 2)
    large = mean_at_k([[1, 0]] * 50 + [[0, 0]] * 50)
    assert small.mean == large.mean == 0.25
    assert large.high - large.low < small.high - small.low
    assert mean_at_k([[1, 1]]).to_dict() == {"n": 1, "mean": 1.0, "low": 0.0, "high": 1.0}
    with pytest.raises(ValueError, match="same number"):
        mean_at_k([[1, 0], [1]])
    with pytest.raises(ValueError, match="no problems"):
        mean_at_k([])


def test_interval_bounds_are_student_t_by_hand():
    """Unclipped data, bounds worked out by hand from printed t tables: a normal
    1.96 quantile (or a z interval) gives other numbers, and nothing is clipped."""
    from coevolve.stats import mean_interval

    # n = 3: mean 0.5, sample std 0.1, t(0.975, df 2) = 4.303: half = 4.303 * 0.1 / sqrt(3) = 0.24843
    three = mean_interval([0.4, 0.5, 0.6])
    assert (three.low, three.high) == (pytest.approx(0.25157, abs=1e-5), pytest.approx(0.74843, abs=1e-5))
    # n = 5: mean 0.4, std sqrt(0.025) = 0.158114, t(df 4) = 2.776: half = 0.196292
    five = mean_interval([0.2, 0.3, 0.4, 0.5, 0.6])
    assert (five.low, five.high) == (pytest.approx(0.203708, abs=1e-5), pytest.approx(0.596292, abs=1e-5))
    # n = 10, alternating 0.3 / 0.7: mean 0.5, std sqrt(10 * 0.04 / 9) = 0.210819, t(df 9) = 2.262:
    # half = 2.262 * 0.210819 / sqrt(10) = 0.150800
    ten = mean_interval([0.3, 0.7] * 5)
    assert (ten.low, ten.high) == (pytest.approx(0.349200, abs=1e-5), pytest.approx(0.650800, abs=1e-5))


def test_max_at_k_and_best_of_k_by_hand():
    from coevolve.stats import best_of_k, max_at_k, pass_at_k

    # graded rewards (ANLS-like): problem 1 (0.2, 0.9, 0.5, 0.0), problem 2 (0.4, 0.4, 0.4, 0.4)
    attempts = [[0.2, 0.9, 0.5, 0.0], [0.4, 0.4, 0.4, 0.4]]
    assert max_at_k(attempts).mean == pytest.approx((0.9 + 0.4) / 2)
    # best of 2 drawn from 4: sorted (0, 0.2, 0.5, 0.9), weights C(i, 1)/C(4, 2) = (0, 1, 2, 3)/6:
    # (0.2 + 1.0 + 2.7) / 6 = 0.65; problem 2: 0.4
    assert best_of_k(attempts, 2).mean == pytest.approx((0.65 + 0.4) / 2)
    assert best_of_k(attempts, 1).mean == pytest.approx((0.4 + 0.4) / 2)  # best of one = the mean
    assert best_of_k(attempts, 4).mean == max_at_k(attempts).mean
    # 0/1 rewards: best-of-k is the unbiased pass@k, 1 - C(n - c, k) / C(n, k):
    # n = 8, c = 2 solved, k = 4: 1 - C(6, 4)/C(8, 4) = 1 - 15/70
    binary = [[1, 0, 0, 1, 0, 0, 0, 0]]
    assert best_of_k(binary, 4).mean == pytest.approx(1 - 15 / 70)
    assert best_of_k(binary, 8).mean == pass_at_k(binary).mean == 1.0
    with pytest.raises(ValueError, match="1 <= k <= 8"):
        best_of_k(binary, 16)


def test_welch_interval_and_seeds_needed_by_hand():
    from coevolve.stats import Difference, seeds_needed, t95, welch_difference

    # [1, 2, 3] vs [4, 5, 6]: means 2 and 5, sds 1; shares 1/3 each, se = sqrt(2/3) = 0.8165,
    # df = (2/3)² / ((1/3)²/2 + (1/3)²/2) = 4, t(4) = 2.776: 3 ± 2.2666
    told = welch_difference(summarise([1, 2, 3]), summarise([4, 5, 6]))
    assert told.df == pytest.approx(4.0) and told.distinct
    assert (told.low, told.high) == (pytest.approx(0.7334, abs=1e-4), pytest.approx(5.2666, abs=1e-4))
    close = welch_difference(summarise([1, 2, 3]), summarise([2, 3, 4]))  # 1 ± 2.2666 includes 0
    assert not close.distinct and close.low == pytest.approx(-1.2666, abs=1e-4)
    assert welch_difference(summarise([1, 2, 3]), summarise([4])) is None  # one seed: no spread
    assert welch_difference(summarise([3, 3]), summarise([3, 3])) == Difference(0.0, 0.0, 0.0, None)
    assert welch_difference(summarise([3, 3]), summarise([4, 4])).distinct  # no seed varies, the means differ
    # 80% power at 5%: d / sqrt((s_a² + s_b²) / n) >= t(df) + 0.8416 with df = 2 (n - 1) for equal sds.
    # d = 3, s = 1: n = 3 gives 3.674 >= t(4) + 0.8416 = 3.618 (n = 2: 3.0 < t(2) + 0.8416 = 5.14).
    assert seeds_needed(3.0, 1.0, 1.0) == 3
    # d = 1, s = 1: n = 17 gives sqrt(8.5) = 2.915 >= t(32) + 0.8416 = 2.879; n = 16: 2.828 < t(30) + 0.8416 = 2.884
    assert seeds_needed(1.0, 1.0, 1.0) == 17
    assert seeds_needed(0.0, 1.0, 1.0) is None and seeds_needed(0.5, 0.0, 0.0) == 2
    assert seeds_needed(1e-6, 1.0, 1.0) is None  # beyond MOST_SEEDS
    assert t95(4) == 2.776 and t95(4.9) == 2.776 and t95(60) == pytest.approx(2.000, abs=1e-3)  # exact: 2.0003
    with pytest.raises(ValueError):
        t95(0.5)


def test_the_difference_of_two_success_rates_by_hand():
    from coevolve.stats import proportion_difference

    # 2 of 2 against 0 of 2: adjusted rates 3/4 and 1/4, half-width 1.96 * sqrt(2 * (3/16) / 4) = 0.60013
    d = proportion_difference(0, 2, 2, 2)
    assert d.difference == pytest.approx(0.5)
    assert (d.low, d.high) == (pytest.approx(-0.10013, abs=1e-5), pytest.approx(1.10013, abs=1e-5))
    assert not d.distinct  # all-or-nothing on two each cannot be told apart
    # 8 of 8 against 0 of 8: 0.9 and 0.1, half-width 1.96 * sqrt(2 * 0.09 / 10) = 0.26296
    d = proportion_difference(0, 8, 8, 8)
    assert (d.difference, d.low) == (pytest.approx(0.8), pytest.approx(0.53704, abs=1e-5)) and d.distinct
    assert proportion_difference(1, 8, 0, 8).difference == pytest.approx(-0.1)  # B minus A
    assert proportion_difference(0, 0, 1, 3) is None


def test_the_sign_test_by_hand():
    from coevolve.stats import sign_test

    # two-sided exact binomial at 1/2 over the changed problems: 2 * P(X <= min) with X ~ Bin(n, 1/2)
    assert sign_test(6, 0) == pytest.approx(2 / 64)  # 6 of 6 one way: the fewest that fall under 0.05
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    assert sign_test(2, 0) == 0.5 and sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0
    assert sign_test(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert sign_test(2, 8) == sign_test(8, 2)
