"""The ES reward of one proposed heuristic: two kinds.

`levels` (ours, the default) and `paper` (the reference code's rewards, for
reproducing Table 5). Both give one reward per candidate; ESOpt z-scores them.

## levels

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
A candidate stopped by a task's evaluation cascade (coevolve/search/cascade.py)
ran validly on the first stage but missed its bar: it gets the bottom of the
"valid but worse" level. ESOpt z-scores the rewards of a generation, so only their order and spacing
matter; the bounds stop one lucky or catastrophic score from swamping the rest.

## paper

Raw objective units, written here for a minimised objective (a maximised one
is negated first, so "better" is always "smaller"):
- EoH+ES (`paper_eoh_rewards`): reward = parent - child, where parent is the
  best objective among the candidate's parents. A child that failed, or is
  worse than the population's worst member, is scored as if it had the
  worst member's objective, but never below `floor` (default -1): its reward
  is max(parent - worst, floor). With an empty population nothing is pinned
  and every reward is clipped at `floor` instead.
- Sample+ES (`paper_sample_rewards`): reward = -objective; a failed candidate
  gets min(valid) - std(valid) (population std; when the valid rewards are all
  equal the margin is max(1% of their mean's magnitude, 1)); with no valid
  candidate all rewards are 0 and the update is empty.
The levels kind exists because at the embedded model's size most children fail
and the paper's raw differences are dominated by which ones parse; with a
capable model the paper's reward keeps the objective's own scale.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from coevolve.search.population import Candidate, Direction

if TYPE_CHECKING:  # the config imports the method registry, which imports this module
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
    if candidate.failure == "cascade":  # ran validly on the cascade's first stage, below its bar: worse, not failing
        return -abs(levels.worse_floor)
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


def _minimised(objective: float | None, direction: Direction) -> float | None:
    if objective is None or not math.isfinite(objective):
        return None
    return float(objective) if direction == "min" else -float(objective)


def paper_eoh_rewards(children: Sequence[float | None], parents: Sequence[float | None],
                      population: Sequence[float], direction: Direction, floor: float = -1.0) -> list[float]:
    """The reference EoH+ES reward per child (None: the child failed). `parents[i]`
    is the best objective among child i's parents (None: no parent);
    `population` holds the objectives of the population the parents came from,
    before the children join it."""
    members = [m for m in (_minimised(o, direction) for o in population) if m is not None]
    worst = max(members) if members else None
    rewards = []
    for child, parent in zip(children, parents, strict=True):
        c, p = _minimised(child, direction), _minimised(parent, direction)
        if worst is not None and (c is None or c > worst):
            c = worst if p is None else min(worst, p - floor)  # pinned: no worse than `floor` below the parent
        if c is None:
            reward = floor
        else:
            reward = -c if p is None else p - c
        rewards.append(reward if worst is not None else max(reward, floor))
    return rewards


def paper_sample_rewards(children: Sequence[float | None], direction: Direction,
                         epsilon: float = 1e-8) -> list[float]:
    """The reference Sample+ES reward per candidate (None: it failed)."""
    minimised = [_minimised(c, direction) for c in children]
    valid = np.array([-m for m in minimised if m is not None], dtype=np.float64)
    if valid.size == 0:
        return [0.0] * len(children)  # no direction signal: an empty update
    spread = float(valid.std(ddof=0))
    if not math.isfinite(spread) or spread <= epsilon:
        spread = max(abs(float(valid.mean())) * 0.01, 1.0)
    low = float(valid.min()) - spread
    return [low if m is None else -m for m in minimised]
