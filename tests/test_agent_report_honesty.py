"""What an agent comparison and `coevolve eval` say when there is little to say (walkthrough s54, findings
1, 6 and 13): an arm whose ES updates were all flat trained nothing, and the report says so; a 95% interval
of problems that all scored 0 (or all 1) is not [0.000, 0.000]; and eval's paired lines collapse to one
where no arm moved on any problem, without the well-formed pairing that constrained decoding fixes at 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.agents.evaluate import ArmResult
from coevolve.agents.rollout import Trajectory
from coevolve.base.config import as_dict, dump_toml, read_toml
from coevolve.base.durable import atomic_write_json
from coevolve.plan import COMPARE_CONFIG, HELDOUT_SCORES, RunSpec, base_directory, load_compare_config
from coevolve.stats import Interval, mean_at_k, mean_interval, pass_at_k

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ finding 6: zero-spread intervals
def test_all_zero_problems_get_the_exact_upper_bound_not_a_zero_width_interval():
    none = mean_interval([0.0] * 10)
    # Clopper-Pearson, 0 of 10: 1 - 0.025^(1/10) = 0.3085
    assert (none.low, none.high) == (0.0, pytest.approx(0.3085, abs=1e-4))
    every = mean_interval([1.0] * 10)
    assert (every.low, every.high) == (pytest.approx(0.6915, abs=1e-4), 1.0)
    assert str(pass_at_k([[0.0, 0.0]] * 10)) == "0.000 [0.000, 0.308]"
    assert str(mean_at_k([[1.0, 1.0]] * 10)) == "1.000 [0.692, 1.000]"


def test_intervals_with_spread_are_unchanged():
    ten = mean_interval([0.3, 0.7] * 5)  # Student t, as tests/test_stats.py works out by hand
    assert (ten.low, ten.high) == (pytest.approx(0.349200, abs=1e-5), pytest.approx(0.650800, abs=1e-5))
    assert mean_interval([0.5] * 4) == Interval(4, 0.5, 0.5, 0.5)  # no spread off 0/1: Mean@k's own case


# ------------------------------------------------------------------ finding 1: arms that trained nothing
def comparison(tmp_path: Path) -> tuple[Path, object]:
    """The example agent comparison shrunk to base vs esopt, one seed, budget 8, 3 problems x 2 attempts."""
    raw = read_toml(ROOT / "examples" / "agents_compare.toml")
    raw["compare"].update({"methods": ["base", "esopt"], "seeds": [0], "budgets": [8]})
    raw["eval"].update({"problems": 3, "k": 2, "max_tokens": 8})
    raw["agent"].update({"population": 2, "batch": 2, "eval_cases": 2})
    path = tmp_path / "agents.toml"
    path.write_text(dump_toml(raw))
    config = load_compare_config(path)
    root = tmp_path / "c"
    root.mkdir()
    (root / COMPARE_CONFIG).write_text(dump_toml(as_dict(config)))
    same = [[1, 0], [0, 0], [1, 1]]
    atomic_write_json(base_directory(root, "sudoku", 0) / HELDOUT_SCORES, {"attempts": same, "well_formed": 1.0})
    run = RunSpec("sudoku", "esopt", 8, 0).directory(root)
    atomic_write_json(run / HELDOUT_SCORES, {"attempts": same, "well_formed": 1.0})
    return run, config


def render_with(tmp_path: Path, es: dict) -> tuple[str, dict]:
    from coevolve.report import render

    run, _ = comparison(tmp_path)
    atomic_write_json(run / "summary.json", {"kind": "agent", "es": es, "skill": None})
    render(tmp_path / "c")
    return (tmp_path / "c" / "report.md").read_text(), json.loads((tmp_path / "c" / "results.json").read_text())


def test_an_arm_whose_es_updates_were_all_flat_is_said_to_have_trained_nothing(tmp_path):
    text, results = render_with(tmp_path, {"updates": 2, "flat": 2})
    said = ("sudoku, budget 8: esopt vs base: trained nothing: all 2 ES updates were flat (every member's reward "
            "equal), so its weights are the base's (Mean@2 0.500 vs 0.500; paired per problem, 0 of 3 better, "
            "0 worse, sign test p = 1).")
    assert results["conclusions"] == [said] and f"- {said}" in text
    assert "cannot be told apart" not in text
    assert "| 2 (2 flat: no weight moved) |" in text and "| - |" in text  # base: no ES


def test_an_arm_with_some_flat_updates_still_gets_its_verdict_and_the_count(tmp_path):
    text, results = render_with(tmp_path, {"updates": 2, "flat": 1})
    assert results["conclusions"] == [
        "sudoku, budget 8: esopt vs base: cannot be told apart (Mean@2 0.500 vs 0.500; paired per problem, "
        "0 of 3 better, 0 worse, sign test p = 1; 1 of 2 ES updates flat)."]
    assert "| 2 (1 flat) |" in text


# ------------------------------------------------------------------ finding 13: eval's paired lines
def arm(name: str, played: dict[str, list[tuple[float, float]]]) -> ArmResult:
    """An arm's result from problem -> its attempts as (reward, well-formed rate), k = 2."""
    trajectories = [Trajectory(task="x", case_id=case, messages=[], actions=[], observations=[""], reward=reward,
                               metrics={"well_formed": formed})
                    for case, attempts in played.items() for reward, formed in attempts]
    return ArmResult(name, 2, len(played), Interval(1, 0, 0, 0), Interval(1, 0, 0, 0), None, trajectories)


def test_arms_that_differ_nowhere_take_one_line():
    from coevolve.commands.agent_eval import against_base

    same = {f"p{i}": [(0.0, 1.0), (0.0, 1.0)] for i in range(10)}
    lines = against_base([arm("base", same), arm("esopt", same), arm("skill", same), arm("both", same)], True)
    assert lines == ["no arm differs from the base on any problem (10 problems, every measure +0.000)"]


def test_constrained_decoding_leaves_out_the_well_formed_pairing():
    from coevolve.commands.agent_eval import against_base

    base = arm("base", {f"p{i}": [(0.0, 1.0), (0.0, 1.0)] for i in range(6)})
    skill = arm("skill", {f"p{i}": [(1.0, 1.0), (1.0, 1.0)] for i in range(6)})
    lines = against_base([base, skill], constrained=True)
    assert lines == ["skill vs base: +1.000: 6 of 6 problems better, 0 worse; told apart (sign test p = 0.031)",
                     "skill vs base (Pass@2): +1.000: 6 of 6 problems better, 0 worse; told apart "
                     "(sign test p = 0.031)"]
    assert any("(well-formed)" in line for line in against_base([base, skill]))  # free decoding: still paired
