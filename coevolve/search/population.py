"""Candidates and the population they compete in: prob-rank parent selection,
survival of the best N, and removal of duplicates by objective (EoH's rules),
equal objectives told apart by the run's tie-breaks ([eoh] tie_break)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

import numpy as np

from coevolve.base.errors import UsageError, did_you_mean
from coevolve.base.records import Candidate  # noqa: F401  (the population's members; re-exported)
from tasks.base import declared_behaviour

Direction = Literal["min", "max"]


def better(a: float, b: float, direction: Direction) -> bool:
    return a < b if direction == "min" else a > b


# What every candidate has to break a tie with: its scoring's time, and its program's non-blank
# lines; a task's decision descriptors (Candidate.behaviour) are the others ([eoh] tie_break)
MEASURED = ("seconds", "lines")


def parse_tie(tie: str) -> tuple[str, str]:
    """("min" or "max", NAME) of one tie-break as [eoh] tie_break writes it ("min lines")."""
    way, _, name = tie.partition(" ")
    return way, name


def check_ties(ties: Sequence[str], task: Any) -> None:
    """Every tie-break names something each candidate has: a measure, or a decision descriptor the task
    declares (checked once the task is built, before the run directory exists; raise UsageError)."""
    if not ties:
        return
    known = [*MEASURED, *declared_behaviour(task)]
    for tie in ties:
        name = parse_tie(tie)[1]
        if name not in known:
            raise UsageError(f"config error: eoh.tie_break: {name!r} is not measured on every program nor a "
                             f"decision descriptor of task {getattr(task, 'name', task)} (known: {', '.join(known)})"
                             + did_you_mean(name, known))


def tie_value(candidate: Candidate, tie: str) -> float:
    """`candidate`'s value of one tie-break ("min NAME" or "max NAME"), lower first; a candidate without
    the value (a descriptor its task could not give) comes after those with one."""
    way, name = parse_tie(tie)
    if name == "seconds":
        value: float | None = candidate.seconds
    elif name == "lines":
        value = sum(1 for line in (candidate.code or "").splitlines() if line.strip())
    else:
        value = (candidate.behaviour or {}).get(name)
    if value is None or not math.isfinite(value):
        return math.inf
    return value if way == "min" else -value


def dedup_key(objective: float, decimals: int) -> float:
    """What makes two objectives the same ([eoh] dedup_decimals: -1 exact, else rounded to that many)."""
    return objective if decimals < 0 else round(objective, decimals)


RankKey = Callable[[Candidate], tuple]


def sort_key(direction: Direction, ties: Sequence[str] = ()) -> RankKey:
    """Best first; equal objectives by the tie-breaks in order ([eoh] tie_break), then to the earlier
    candidate (the id, last) so the order is deterministic."""
    sign = 1.0 if direction == "min" else -1.0
    return lambda c: (sign * c.objective, *(tie_value(c, t) for t in ties), c.id)


def outranks(key: RankKey, a: Candidate, b: Candidate) -> bool:
    """`a` ranks strictly above `b` by `key` before the id: a better objective, or an equal one that wins
    the tie-breaks. What replaces an archive's program; an equal one never does, so the earlier stays."""
    return key(a)[:-1] < key(b)[:-1]


@dataclass
class Population:
    size: int
    direction: Direction
    members: list[Candidate] = field(default_factory=list)
    decimals: int = -1  # >= 0: objectives equal after rounding to this many decimals are duplicates
    with_replacement: bool = False  # parent draws with replacement (the reference code's random.choices)
    ties: tuple[str, ...] = ()  # [eoh] tie_break: what tells equal objectives apart

    def __len__(self) -> int:
        return len(self.members)

    def add(self, candidate: Candidate) -> bool:
        """Admit a valid candidate unless one with the same objective is already in; under tie-breaks,
        one that wins them takes that one's place."""
        if not candidate.valid:
            return False
        key = self._dedup_key(candidate.objective)
        for i, member in enumerate(self.members):
            if self._dedup_key(member.objective) == key:
                # (objectives equal only when rounded keep the better exact one before any tie-break)
                if not self.ties or not outranks(sort_key(self.direction, self.ties), candidate, member):
                    return False
                self.members[i] = candidate
                return True
        self.members.append(candidate)
        return True

    def _dedup_key(self, objective: float) -> float:
        return dedup_key(objective, self.decimals)

    def survive(self) -> None:
        """Keep the best `size`, ranked best first."""
        self.members.sort(key=sort_key(self.direction, self.ties))
        del self.members[self.size:]

    def ranked(self) -> list[Candidate]:
        return sorted(self.members, key=sort_key(self.direction, self.ties))

    def best(self) -> Candidate | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def select(self, count: int, rng: np.random.Generator) -> list[Candidate]:
        """Prob-rank selection: weight 1 / (rank + 1 + |pop|), rank 0 = best. Without
        replacement (default) an ask for more parents than there are members gets
        every member; with replacement a parent may come twice, in draw order."""
        ranked = self.ranked()
        if not ranked:
            return []
        if count >= len(ranked) and not self.with_replacement:
            return ranked
        weights = np.array([1.0 / (rank + 1 + len(ranked)) for rank in range(len(ranked))])
        chosen = rng.choice(len(ranked), size=count, replace=self.with_replacement, p=weights / weights.sum())
        return [ranked[i] for i in (chosen if self.with_replacement else sorted(chosen))]

    def snapshot(self) -> list[dict]:
        return [{"id": c.id, "objective": c.objective, "operator": c.operator, "idea": c.idea, "code": c.code}
                for c in self.ranked()]
