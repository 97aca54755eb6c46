"""The ES reward of one proposed heuristic.

Four ordered levels, so that a weak proposer still gets a gradient:

    unparseable  <  failing  <  valid but worse  <  0  <  improving
       -1.0         -0.6        (-0.4, 0)               (0, 1)

A valid candidate scores `tanh(gain * rel)` when it improves on its reference
(rel = relative improvement, sign-corrected for the task's direction) and
`-|worse_floor| * tanh(gain * |rel|)` when it is worse: bounded, smooth, and
never reaching the failing level however bad the tour. The reference is the
mean objective of the candidate's parents (m*/e* operators); for parentless
proposals (i1) it is the median objective of the population at the time of
the step, or of the step's own valid candidates when the population is empty.
ESOpt z-scores the rewards of a generation, so only their order and spacing
matter; the bounds stop one lucky or catastrophic score from swamping the rest.
"""

from __future__ import annotations

import math
from typing import Sequence

from coevolve.search.population import Candidate, Direction
from coevolve.search.runconfig import RewardSection


def relative_improvement(objective: float, reference: float, direction: Direction) -> float:
    """Positive when `objective` beats `reference`; scale-free (divided by |reference|)."""
    scale = abs(reference) if reference != 0 else 1.0
    diff = reference - objective if direction == "min" else objective - reference
    return diff / scale


def candidate_reward(candidate: Candidate, reference: float | None, direction: Direction,
                     levels: RewardSection) -> float:
    if candidate.code is None:
        return levels.unparseable
    if not candidate.valid:
        return levels.failing
    if reference is None:  # nothing valid to compare with: a valid program is all we know
        return 0.0
    rel = relative_improvement(candidate.objective, reference, direction)
    if rel >= 0:
        return math.tanh(levels.gain * rel)
    return -abs(levels.worse_floor) * math.tanh(levels.gain * -rel)


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def member_rewards(rewards: Sequence[float], members: Sequence[int]) -> dict[int, float]:
    """Mean reward per ES member over the candidates it proposed."""
    totals: dict[int, list[float]] = {}
    for reward, member in zip(rewards, members):
        totals.setdefault(member, []).append(reward)
    return {member: sum(v) / len(v) for member, v in totals.items()}
