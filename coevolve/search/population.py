"""Candidates and the population they compete in: prob-rank parent selection,
survival of the best N, and removal of duplicates by objective (EoH's rules)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from coevolve.base.records import Candidate  # noqa: F401  (the population's members; re-exported)

Direction = Literal["min", "max"]


def better(a: float, b: float, direction: Direction) -> bool:
    return a < b if direction == "min" else a > b


def sort_key(direction: Direction):
    """Best first; ties go to the earlier candidate so the order is deterministic."""
    sign = 1.0 if direction == "min" else -1.0
    return lambda c: (sign * c.objective, c.id)


@dataclass
class Population:
    size: int
    direction: Direction
    members: list[Candidate] = field(default_factory=list)
    decimals: int = -1  # >= 0: objectives equal after rounding to this many decimals are duplicates
    with_replacement: bool = False  # parent draws with replacement (the reference code's random.choices)

    def __len__(self) -> int:
        return len(self.members)

    def add(self, candidate: Candidate) -> bool:
        """Admit a valid candidate unless one with the same objective is already in."""
        if not candidate.valid:
            return False
        key = self._dedup_key(candidate.objective)
        if any(self._dedup_key(m.objective) == key for m in self.members):
            return False
        self.members.append(candidate)
        return True

    def _dedup_key(self, objective: float) -> float:
        return objective if self.decimals < 0 else round(objective, self.decimals)

    def survive(self) -> None:
        """Keep the best `size`, ranked best first."""
        self.members.sort(key=sort_key(self.direction))
        del self.members[self.size:]

    def ranked(self) -> list[Candidate]:
        return sorted(self.members, key=sort_key(self.direction))

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
