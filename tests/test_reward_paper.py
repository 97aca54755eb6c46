"""reward.kind = "paper": the reference code's ES rewards, checked on hand-made
populations against numbers worked out by hand from the reference formulas
(zz1358m/Agentic-ESOpt, eoh_interface_EC.py: _objective_to_reward with
reward_mode "improvement" and floor -1; _calibrate_model_es_invalid_rewards with
margin 1 for Sample+ES)."""

import math

import pytest

from coevolve.es import normalise
from coevolve.search.reward import paper_eoh_rewards, paper_sample_rewards


def test_eoh_reward_is_parent_minus_child_with_failures_pinned_and_clipped():
    population = [6.0, 6.2, 6.5, 9.0]  # worst 9.0
    children = [6.1, 6.8, 8.5, 12.0, None, None]
    parents = [6.2, 6.2, 6.2, 6.2, 6.2, 8.5]
    rewards = paper_eoh_rewards(children, parents, population, "min")
    assert rewards == pytest.approx([
        0.1,    # better than its parent
        -0.6,   # worse than its parent, better than the population's worst: raw difference
        -2.3,   # still better than the worst: raw, *below* the floor (the reference clips only pinned children)
        -1.0,   # worse than the worst: scored as min(worst 9.0, parent + 1 = 7.2) -> clipped at -1
        -1.0,   # failed: the same as the previous
        -0.5,   # failed, parent 8.5: min(9.0, 9.5) = 9.0 -> 8.5 - 9.0
    ])


def test_eoh_reward_pins_to_the_worst_when_that_is_closer_than_the_floor():
    population = [6.0, 6.2, 6.5, 7.0]
    rewards = paper_eoh_rewards([None, 7.5], [6.2, 6.2], population, "min")
    assert rewards == pytest.approx([-0.8, -0.8])  # min(7.0, 7.2) = 7.0


def test_eoh_reward_on_a_maximised_objective():
    population = [40.0, 39.5, 38.0]  # worst 38.0
    rewards = paper_eoh_rewards([39.8, 37.0, 38.2, None], [39.5] * 4, population, "max")
    assert rewards == pytest.approx([0.3, -1.0, -1.3, -1.0])


def test_eoh_reward_with_an_empty_population_clips_everything_at_the_floor():
    # no worst member to pin to: raw values, then max(reward, floor)
    rewards = paper_eoh_rewards([6.1, 5.0, None], [None, 5.5, 5.5], [], "min")
    assert rewards == pytest.approx([-1.0, 0.5, -1.0])
    assert paper_eoh_rewards([None], [5.5], [], "min", floor=-3.0) == [-3.0]


def test_sample_reward_is_the_negated_objective_with_failures_below_the_valid_ones():
    rewards = paper_sample_rewards([6.0, None, 7.0, 8.0, None], "min")
    spread = math.sqrt(2 / 3)  # population std of -6, -7, -8
    assert rewards == pytest.approx([-6.0, -8.0 - spread, -7.0, -8.0, -8.0 - spread])
    # maximised: the objective itself, failures at min - std
    assert paper_sample_rewards([40.0, 41.0, None], "max") == pytest.approx([40.0, 41.0, 39.5])


def test_sample_reward_edge_cases():
    # equal valid rewards: the margin falls back to max(1% of |mean|, 1)
    assert paper_sample_rewards([6.5, 6.5, None], "min") == pytest.approx([-6.5, -6.5, -7.5])
    assert paper_sample_rewards([2700.0, 2700.0, None], "max") == pytest.approx([2700.0, 2700.0, 2673.0])
    # nothing valid: no signal, an all-zero update
    assert paper_sample_rewards([None, None], "min") == [0.0, 0.0]
    assert normalise(paper_sample_rewards([None, None, None], "min")).tolist() == [0.0, 0.0, 0.0]


def test_paper_rewards_keep_the_objective_scale_where_levels_saturate():
    # one failing child among improving ones: in the paper reward the 1.5% improvement
    # stays visible next to the failure; ordering is by objective
    population = [7.0, 7.1, 7.2]
    rewards = paper_eoh_rewards([6.895, 7.0, None], [7.0, 7.0, 7.0], population, "min")
    assert rewards == pytest.approx([0.105, 0.0, -0.2])
    z = normalise(rewards, ddof=0)
    assert z[0] > 1.0 and z[2] < -1.0
