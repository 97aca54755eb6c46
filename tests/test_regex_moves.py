"""Moves drawn from an agent task's action_pattern (tasks/regex_moves.py): every draw is matched in full by
the pattern, the draws cover the pattern's choices, repeats stay short, back-references repeat their group,
and a construct no move is drawn for is named."""

from __future__ import annotations

import re
from itertools import product

import numpy as np
import pytest

from tasks.regex_moves import EXTRA, LONG, NotDrawable, draw_move, lengthens, undecodable


def draws(pattern: str, n: int = 400, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [draw_move(pattern, rng) for _ in range(n)]


def test_a_small_pattern_is_covered_and_nothing_outside_it_is_drawn():
    # 4 x 4 x 4 = 64 moves, listed by hand from the pattern; 400 uniform draws miss a given one with
    # probability (63/64)**400 < 2e-3, so any one of them with at most 64 times that (< 0.13); the seed is fixed
    every = {f"set {r} {c} {v}" for r, c, v in product("1234", repeat=3)}
    assert set(draws("set [1-4] [1-4] [1-4]")) == every


@pytest.mark.parametrize("pattern", [
    r"guess [1-9][0-9]{0,2}", r"(```python\n[^`]{1,800}\n```|\\boxed\{[^{}\n]{1,40}\})", r"\w+\s\d{2}",
    r"^move (up|down|left|right)$", r"(?:ab)+?c*", r"[^a-z]{3}", r"\bgo\b", r"[A-Z]\.\s?[a-z]+",
])
def test_every_draw_is_matched_in_full(pattern):
    assert all(re.fullmatch(pattern, move) for move in draws(pattern, 200))


def test_repeats_stay_a_few_past_their_minimum():
    lengths = {len(m) for m in draws(r"x{2,800}")}
    assert lengths == set(range(2, 2 + EXTRA + 1))
    bodies = [len(m) - len("```python\n\n```") for m in draws(r"```python\n[^`]{1,800}\n```", 200)]
    assert min(bodies) == 1 and max(bodies) == 1 + EXTRA



def test_long_moves_run_on_where_the_pattern_lets_them():
    rng = np.random.default_rng(0)
    lengths = {len(draw_move(r"x{2,800}", rng, extra=LONG)) for _ in range(400)}
    assert min(lengths) >= 2 and max(lengths) == 2 + LONG and len(lengths) > LONG / 2
    assert {len(draw_move(r"x{2,5}", rng, extra=LONG)) for _ in range(100)} == {2, 3, 4, 5}  # never past the max
    code = r"(```python\n[^`]{1,800}\n```|\\boxed\{[^{}\n]{1,40}\})"
    long_code = [draw_move(code, rng, extra=LONG) for _ in range(100)]
    assert all(re.fullmatch(code, move) for move in long_code)
    # a long move takes the branch that runs on furthest: the code block, never the short \boxed{} answer
    assert all(move.startswith("```python") for move in long_code) and max(map(len, long_code)) > 80
    # only a repeat that may run past EXTRA makes a long move differ from a short one
    assert lengthens(code) and lengthens(r"a+") and lengthens(r"(?:x(?:ab){0,9})")
    assert not lengthens(r"guess [1-9][0-9]{0,2}") and not lengthens(r"set [1-9] [1-9] [1-9]")
    assert not lengthens(r"(up|down){1,3}")


def test_a_back_reference_repeats_its_group():
    moves = draws(r"(a|b)-(\d)-\1\2", 100)
    assert all(m[0] == m[4] and m[2] == m[5] for m in moves) and {m[0] for m in moves} == {"a", "b"}


def test_branches_are_all_drawn():
    assert {m.split()[1] for m in draws(r"move (up|down|left|right)", 100)} == {"up", "down", "left", "right"}


@pytest.mark.parametrize("pattern,named", [
    (r"x(?=y)y", "assert"), (r"(?<!a)b", "assert not"), (r"(a)?(?(1)b|c)", "groupref exists"),
])
def test_a_construct_no_move_is_drawn_for_is_named(pattern, named):
    with pytest.raises(NotDrawable, match=named):
        draw_move(pattern, np.random.default_rng(0))


def test_draws_are_reproducible_from_the_seed():
    assert draws(r"guess [1-9][0-9]{0,2}", 20, seed=3) == draws(r"guess [1-9][0-9]{0,2}", 20, seed=3)
    assert draws(r"guess [1-9][0-9]{0,2}", 20, seed=3) != draws(r"guess [1-9][0-9]{0,2}", 20, seed=4)


@pytest.mark.parametrize("pattern,named", [
    (r"guess [1-9][0-9]{0,2}", None), (r"^move (up|down)$", None), (r"(?i)set [1-4]", None), (r"a*+b", None),
    (r"(a|b)c\1", "a back-reference"), (r"(?P<n>a)(?P=n)", "a back-reference"), (r"x(?=y)y", "a lookaround"),
    (r"(?<!a)b", "a lookaround"), (r"\bgo\b", r"a word boundary (\b, \B)"), (r"(a)?(?(1)b|c)", "a conditional"),
    (r"(?>ab)c", "an atomic group"), (r"(x|(y(?=z)z))+", "a lookaround"),  # found inside groups and branches
])
def test_what_constrained_decoding_cannot_enforce_is_named(pattern, named):
    """Which constructs the engine refuses is checked against the real engine in
    tests/test_agents_constrained.py."""
    assert undecodable(pattern) == named
