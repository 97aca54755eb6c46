"""coevolve.stats on inputs whose answers are worked out by hand."""

from __future__ import annotations

import math

import pytest

from coevolve.stats import band, gap_reduction, step_value, summarise


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


def test_gap_reduction():
    assert gap_reduction(0.10, 0.075) == pytest.approx(0.25)
    assert gap_reduction(0.10, 0.12) == pytest.approx(-0.2)  # the variant is worse
    assert gap_reduction(0.0, 0.01) is None
    assert gap_reduction(None, 0.01) is None and gap_reduction(0.1, None) is None


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
