"""Random strings that a regular expression matches in full: the readable
moves `coevolve check-task` plays against an agent environment that declares an
`action_pattern`, to find a `step` that breaks on a move of the right form
(a number out of range, a cell already filled) before a run does.

Drawn from Python's own parse of the pattern (`re._parser`), so a move is
what `re.fullmatch` accepts; repeats are kept short (a few more than the
minimum), as moves are, or, with `extra=LONG`, long (a reply that runs on,
for a `step` that breaks only on long text). Lookarounds and conditionals are not drawn:
`draw_move` raises `NotDrawable` naming the construct. `undecodable` names
a construct the engine's constrained decoding refuses (check-task warns).
"""

from __future__ import annotations

import re
from re import _constants as sre  # the parse tree's opcodes, stable since Python 3.11
from re import _parser as parser
from typing import Any

import numpy as np

EXTRA = 4  # repeats beyond a quantifier's minimum, at most: short moves, as a model writes them
LONG = 80  # the same for long moves: a reply that runs on to a few hundred characters
REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
UNIVERSE = [chr(c) for c in range(32, 127)] + ["\n", "é"]  # one letter past ASCII: a model writes them
CATEGORIES = {
    sre.CATEGORY_DIGIT: str.isdigit, sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    sre.CATEGORY_SPACE: str.isspace, sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    sre.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    sre.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}
EMPTY_ANCHORS = (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING, sre.AT_END, sre.AT_END_STRING)


# what the engine's grammar backend refuses to decode under (vLLM's xgrammar: tests/test_agents_constrained.py
# checks each against the real engine)
UNDECODABLE = {sre.GROUPREF: "a back-reference", sre.GROUPREF_EXISTS: "a conditional", sre.ASSERT: "a lookaround",
               sre.ASSERT_NOT: "a lookaround", sre.ATOMIC_GROUP: "an atomic group"}
BOUNDARIES = (sre.AT_BOUNDARY, sre.AT_NON_BOUNDARY)


def undecodable(pattern: str) -> str | None:
    """The first construct of `pattern` that constrained decoding cannot enforce (a back-reference,
    a lookaround, a word boundary, a conditional, an atomic group), or None."""
    def walk(items: Any) -> str | None:
        for op, arg in items:
            if op in UNDECODABLE:
                return UNDECODABLE[op]
            if op == sre.AT and arg in BOUNDARIES:
                return r"a word boundary (\b, \B)"
            found = next((f for f in map(walk, inner(arg)) if f), None)
            if found:
                return found
        return None
    return walk(parser.parse(pattern))


class NotDrawable(ValueError):
    """The pattern uses a construct no move is drawn for (the message names it)."""


def lengthens(pattern: str) -> bool:
    """Whether some repeat of `pattern` may run past EXTRA beyond its minimum: only then does a long
    move differ from a short one (`[1-9][0-9]{0,2}` never does)."""
    return _room(parser.parse(pattern)) > EXTRA


def _room(items: Any) -> int:
    """How far past its minimum the freest repeat of `items` may go, up to LONG."""
    return max([min(arg[1] - arg[0], LONG) for op, arg in items if op in REPEATS]
               + [_room(sub) for _, arg in items for sub in inner(arg)] + [0])


def inner(arg: Any) -> list:
    """The sub-patterns a node of the parse holds: a group's, a repeat's, a branch's."""
    if isinstance(arg, parser.SubPattern):
        return [arg]
    parts = arg if isinstance(arg, (tuple, list)) else ()
    return [s for part in parts for s in inner(part)] if parts else []


def draw_move(pattern: str, rng: np.random.Generator, tries: int = 20, extra: int = EXTRA) -> str:
    """A random string `re.fullmatch(pattern, ...)` accepts, each repeat at most `extra` past its minimum."""
    compiled = re.compile(pattern)
    tree = parser.parse(pattern)
    for _ in range(tries):
        groups: dict[int, str] = {}
        move = _draw(tree, rng, groups, extra)
        if compiled.fullmatch(move):
            return move
    raise NotDrawable(f"no string drawn in {tries} tries matched it in full (word boundaries or a flag "
                      "the drawer ignores)")


def _draw(items: Any, rng: np.random.Generator, groups: dict[int, str], extra: int) -> str:
    out = []
    for op, arg in items:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            out.append(_one_char([(op, arg)], rng))
        elif op in REPEATS:
            low, high, body = arg
            count = int(rng.integers(low, min(high, low + extra) + 1))
            out.extend(_draw(body, rng, groups, extra) for _ in range(count))
        elif op == sre.SUBPATTERN:
            group, _, _, body = arg
            text = _draw(body, rng, groups, extra)
            if group is not None:
                groups[group] = text
            out.append(text)
        elif op == sre.ATOMIC_GROUP:
            out.append(_draw(arg, rng, groups, extra))
        elif op == sre.BRANCH:
            # a long move takes the branch that can run on furthest (react_math: the code block, not the
            # short \boxed{} answer)
            most = max(map(_room, arg[1])) if extra > EXTRA else None
            branches = [b for b in arg[1] if _room(b) == most] if most is not None else arg[1]
            out.append(_draw(branches[int(rng.integers(len(branches)))], rng, groups, extra))
        elif op == sre.GROUPREF:
            out.append(groups.get(arg, ""))
        elif op == sre.AT:
            if arg not in EMPTY_ANCHORS and arg not in (sre.AT_BOUNDARY, sre.AT_NON_BOUNDARY):
                raise NotDrawable(f"it uses the anchor {arg}")
        else:
            raise NotDrawable(f"it uses {str(op).lower().replace('_', ' ')}, which no move is drawn for")
    return "".join(out)


def _one_char(node: list, rng: np.random.Generator) -> str:
    choices = [c for c in UNIVERSE if _matches(node, c)]
    if not choices:  # a set of characters outside printable ASCII only: its first member
        choices = [chr(arg if op == sre.LITERAL else arg[0]) for op, arg in _members(node)
                   if op in (sre.LITERAL, sre.RANGE)]
    if not choices:
        raise NotDrawable("a character set matches no printable character")
    return choices[int(rng.integers(len(choices)))]


def _members(node: list) -> list:
    op, arg = node[0]
    return arg if op == sre.IN else node


def _matches(node: list, char: str) -> bool:
    op, arg = node[0]
    if op == sre.ANY:
        return char != "\n"
    if op == sre.NOT_LITERAL:
        return ord(char) != arg
    negate, hit = False, False
    for member, value in _members(node):
        if member == sre.NEGATE:
            negate = True
        elif member == sre.LITERAL:
            hit = hit or ord(char) == value
        elif member == sre.RANGE:
            hit = hit or value[0] <= ord(char) <= value[1]
        elif member == sre.CATEGORY and value in CATEGORIES:
            hit = hit or CATEGORIES[value](char)
        else:
            raise NotDrawable(f"a character set uses {str(member).lower()}")
    return hit != negate
