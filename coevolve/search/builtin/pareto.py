"""Pareto (GEPA's candidate selection, in our own code): the archive holds
every program that is the best on at least one training instance and that no
other program dominates; a request's parents are drawn from it with
probability proportional to the number of instances each is the best on.

EoH's population keeps the best N programs on average, so a program that is
worse on average but the only one that does well on some instances is lost;
drawing parents per instance keeps such ideas alive (GEPA's argument against
collapsing onto one line of search). It reads the per-instance objectives
the sandbox's trusted worker hands back, so the task must have
`instance_scores` (every built-in but ASP; a task without is refused before
the run).

A program that is not the best on any instance never will be (the bests only
improve), so the archive keeps the winners alone. Programs with the same value
on an instance all win it; of two with the same per-instance objectives the
earlier is kept; a winner that another winner dominates (as good everywhere,
better somewhere) is dropped. The inner method (EoH or Sample) gives the
plan and how many parents each operator takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, Field

from coevolve.base.config import STRICT
from coevolve.base.errors import UsageError
from coevolve.base.records import ParetoFront, ParetoSnapshot, ParetoWin
from coevolve.search.builtin.over import OverMethod
from coevolve.search.population import Candidate, Population


class ParetoOptions(BaseModel):
    """[pareto]"""

    model_config = STRICT  # as every section: nothing coerced ("4", 4.0 and true are not ints)

    over: Literal["eoh", "sample"] = "eoh"  # the method whose plan and parent counts run on the front
    size: int = Field(0, ge=0)  # programs kept at most (those best on the most instances); 0: every winner


def instance_wins(profiles: Sequence[Sequence[float]], direction: str) -> list[int]:
    """For each profile, the number of instances on which it is the best (ties all count)."""
    if not profiles:
        return []
    table = np.asarray(profiles, dtype=float)
    best = table.min(axis=0) if direction == "min" else table.max(axis=0)
    return [int(n) for n in (table == best).sum(axis=1)]


def dominates(a: Sequence[float], b: Sequence[float], direction: str) -> bool:
    """`a` is as good as `b` on every instance and better on one."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if direction == "max":
        x, y = -x, -y
    return bool(np.all(x <= y) and np.any(x < y))


@dataclass
class WinsPopulation(Population):
    """The front as the inner method's parent rule sees it: draws weighted by instances won."""

    wins: dict[int, int] = field(default_factory=dict)

    def select(self, count: int, rng: np.random.Generator) -> list[Candidate]:
        ranked = self.ranked()
        if not ranked:
            return []
        if count >= len(ranked) and not self.with_replacement:
            return ranked
        weights = np.array([self.wins[c.id] for c in ranked], dtype=float)
        chosen = rng.choice(len(ranked), size=count, replace=self.with_replacement, p=weights / weights.sum())
        return [ranked[i] for i in (chosen if self.with_replacement else sorted(chosen))]


class ParetoMethod(OverMethod):
    label = "Pareto"
    section = "pareto"
    options = ParetoOptions

    def check_task(self, task: Any) -> None:
        """The task gives per-instance objectives (that they are finite for its template is the task
        checker's, coevolve/commands/check_task.py, which `run` and `compare` call first)."""
        super().check_task(task)
        if not callable(getattr(task, "instance_scores", None)):
            raise UsageError(f"config error: run.method: pareto draws parents by the instances they win; task "
                             f"{getattr(task, 'name', task)} gives no per-instance objectives (no instance_scores())")

    def plan_notes(self) -> dict:
        return {**self.inner.plan_notes(), "pareto_size": self.opts.size}

    def plan_lines(self) -> list[str]:
        cap = f", at most {self.opts.size} kept" if self.opts.size else ""
        return [f"Pareto over {self.opts.over}: parents drawn from the programs best on some training instance, "
                f"weighted by the instances each wins{cap}"]

    # archive
    def start(self, task: Any) -> None:
        super().start(task)
        self.front: list[Candidate] = []
        self.won: dict[int, int] = {}  # the front's instances won, per id (set by _prune)
        self.unprofiled = 0  # valid programs with no per-instance objectives to compare (kept out)

    def admit(self, step: int, candidates: Sequence[Candidate], evaluations: int) -> None:
        width = len(self.front[0].profile) if self.front else None
        for candidate in candidates:
            if candidate.duplicate_of is not None or not candidate.valid:
                continue
            profile = candidate.profile
            if (not profile or (width is not None and len(profile) != width)
                    or not all(math.isfinite(v) for v in profile)):
                self.unprofiled += 1
                continue
            width = len(profile)
            if all(m.profile != profile for m in self.front):
                self.front.append(candidate)
        self._prune()

    def _prune(self) -> None:
        wins = instance_wins([c.profile for c in self.front], self.direction)
        winners = [c for c, n in zip(self.front, wins) if n]
        kept = [c for c in winners if not any(dominates(o.profile, c.profile, self.direction) for o in winners)]
        if self.opts.size and len(kept) > self.opts.size:
            counts = dict(zip((c.id for c in kept), instance_wins([c.profile for c in kept], self.direction)))
            chosen = {c.id for c in sorted(kept, key=lambda c: (-counts[c.id], *self.rank(c)))[:self.opts.size]}
            kept = [c for c in kept if c.id in chosen]
        self.front = kept
        self.won = dict(zip((c.id for c in kept), instance_wins([c.profile for c in kept], self.direction)))

    def wins(self) -> dict[int, int]:
        return dict(self.won)

    def pool(self) -> WinsPopulation:
        return WinsPopulation(max(1, len(self.front)), self.direction, members=list(self.front),
                              with_replacement=self.config.eoh.parents_with_replacement, wins=self.wins(),
                              ties=tuple(self.config.eoh.tie_break))

    def pick(self, operator: str, rng: np.random.Generator, step: int, slot: int) -> list[Candidate]:
        return self.inner.parents(operator, self.pool(), rng)

    def ranked(self) -> list[Candidate]:
        return sorted(self.front, key=self.rank)

    def members(self) -> list[Candidate]:
        return self.ranked()

    def snapshot(self) -> dict:
        wins = self.wins()
        front = ParetoFront(instances=len(self.front[0].profile) if self.front else 0,
                            wins=[ParetoWin(id=c.id, wins=wins[c.id], objective=c.objective) for c in self.ranked()],
                            unprofiled=self.unprofiled)
        return ParetoSnapshot(population=self.pool().snapshot(), pareto=front).to_json()
