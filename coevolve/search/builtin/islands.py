"""Islands (FunSearch's programs database, in our own code): N islands, each
an archive of its own with the inner method's rules (EoH's population or
Sample's); a request's parents come from one island and its offspring join
that island; every `reset_every` evaluations the worse half of the islands
(ranked by their best program) are emptied and each is refounded with the
best program of a randomly chosen island of the better half.

The island of request `slot` in step `step` is (step + slot) mod N, so every
island gets its share of each step and a resumed run rebuilds the islands
exactly by replaying the logged steps. The reset period is counted in
evaluations (ledger charges), so it is the same for an arm and its +ESOpt
pair. With Sample inside, requests have no parents: the islands then only
decide what is kept.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, Field

from coevolve.base.config import STRICT, config_error
from coevolve.base.records import IslandReset, IslandsSnapshot
from coevolve.search.builtin.over import OverMethod
from coevolve.search.methods import method_section
from coevolve.search.population import Candidate, Population


class IslandsOptions(BaseModel):
    """[islands]"""

    model_config = STRICT  # as every section: nothing coerced ("4", 4.0 and true are not ints)

    over: Literal["eoh", "sample"] = "eoh"  # the method each island runs (its plan, parents and survival)
    islands: int = Field(4, ge=1, le=64)  # FunSearch: 10
    reset_every: int = Field(0, ge=0)  # evaluations between resets; 0: a quarter of run.budget
    size: int = Field(0, ge=0)  # programs kept per island; 0: the inner method's population size


class IslandsMethod(OverMethod):
    label = "Islands"
    section = "islands"
    options = IslandsOptions

    def setup(self) -> None:
        super().setup()
        self.period = self.opts.reset_every or max(1, self.config.run.budget // 4)

    @classmethod
    def check(cls, config: Any) -> None:
        opts = method_section(config, cls.section, cls.options)
        if opts.reset_every > config.run.budget:
            raise config_error("islands.reset_every", f"is longer than the budget (run.budget = {config.run.budget}): "
                               "no island would ever be reset", opts.reset_every,
                               # no flag sets it: `--budget N` under a config's period needs the file edited
                               f"; set islands.reset_every <= {config.run.budget} in the config, or 0: a quarter "
                               "of run.budget")

    # plan: the inner method's
    def plan_notes(self) -> dict:
        return {**self.inner.plan_notes(), "islands": self.opts.islands, "reset_every": self.period}

    def budget_scaled(self) -> dict[str, Any]:
        # the reset period decides which logged steps end in a reset, so a replay under another one
        # would rebuild the islands the run logged (population/gen_NNNN.json) differently
        own = {} if self.opts.reset_every else {"islands.reset_every = 0 (a quarter of run.budget)": self.period}
        return {**super().budget_scaled(), **own}

    def plan_lines(self) -> list[str]:
        return [f"islands: {self.opts.islands} over {self.opts.over}, the worse half reset every "
                f"{self.period} evaluations"]

    def plan_warnings(self, steps: list) -> list[str]:
        largest = max((s.count for s in steps), default=0)
        if self.period >= largest:
            return []
        return [f"islands.reset_every = {self.period} evaluations is shorter than a step ({largest}): the worse "
                "half is reset several times at one step's end, with no new program between resets"]

    # archive
    def population_size(self) -> int:
        return self.opts.size or self.inner.population_size()

    def start(self, task: Any) -> None:
        super().start(task)
        self.islands = [self.new_population() for _ in range(self.opts.islands)]
        self.next_reset = self.period
        self.resets: list[IslandReset] = []

    def island_of(self, step: int, slot: int) -> int:
        return (step + slot) % len(self.islands)

    def pick(self, operator: str, rng: np.random.Generator, step: int, slot: int) -> list[Candidate]:
        return self.inner.parents(operator, self.islands[self.island_of(step, slot)], rng)

    def admit(self, step: int, candidates: Sequence[Candidate], evaluations: int) -> None:
        for slot, candidate in enumerate(candidates):
            if candidate.duplicate_of is None:
                self.islands[self.island_of(step, slot)].add(candidate)
        for island in self.islands:
            island.survive()
        while evaluations >= self.next_reset:
            self._reset(step, evaluations)
            self.next_reset += self.period

    def seed(self, candidate: Candidate) -> None:
        """Every island starts from the seed program, as FunSearch's islands start from the initial one."""
        for island in self.islands:
            island.add(candidate)

    def _reset(self, step: int, evaluations: int) -> None:
        """Empty the worse half (by best program; an empty island is worst, ties to the later island)
        and refound each from the best program of a random island of the better half."""
        count = len(self.islands) // 2
        if count == 0:
            return
        def rank(index: int) -> tuple:
            best = self.islands[index].best()
            return (best is None, *(self.rank(best)[:-1] if best else ()), index)

        order = sorted(range(len(self.islands)), key=rank)
        keep, reset = order[:-count], order[-count:]
        rng = np.random.default_rng([self.config.run.seed, step, evaluations, 20])
        founders = []
        for index in reset:
            source = keep[int(rng.integers(len(keep)))]
            fresh = self.new_population()
            best = self.islands[source].best()
            if best is not None:
                fresh.add(best)
            self.islands[index] = fresh
            founders.append(source)
        self.resets.append(IslandReset(step=step, evaluations=evaluations, reset=reset, from_=founders))

    def ranked(self) -> list[Candidate]:
        seen: dict[int, Candidate] = {}
        for island in self.islands:
            for candidate in island.members:
                seen.setdefault(candidate.id, candidate)
        return sorted(seen.values(), key=self.rank)

    def members(self) -> list[Candidate]:
        return self.ranked()

    def snapshot(self) -> dict:
        merged = Population(len(self.ranked()) or 1, self.direction, members=self.ranked(), ties=self.population.ties)
        return IslandsSnapshot(population=merged.snapshot(),
                               islands=[[c.id for c in island.ranked()] for island in self.islands],
                               resets=self.resets).to_json()

