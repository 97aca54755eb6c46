"""Search methods. A method only decides *what to ask for*: a fixed plan of
steps (operator, how many candidates, base or perturbed models) and the parents
of each request. The loop owns the budget, the generator, the sandbox and ES.

Because the plan does not depend on results, the number of ES generations a
budget allows is known before the run starts (the cosine σ schedule needs it).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Protocol

import numpy as np

from coevolve.search.population import Candidate, Population
from coevolve.search.runconfig import RunConfig


@dataclass(frozen=True)
class StepSpec:
    operator: str  # i1, e1, e2, m1, m2, m3
    count: int  # candidates requested (before the budget cuts the batch)
    perturbed: bool  # True: each ES member proposes `count / G` of them from its own perturbed model


class Method(Protocol):
    name: str

    def plan(self) -> Iterator[StepSpec]:
        """The steps in order, without end; the loop stops at the budget."""

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        """Parents for one request; [] for parentless operators."""


PARENT_COUNTS = {"i1": 0, "e1": None, "e2": None, "m1": 1, "m2": 1, "m3": 1}  # None: the method's `parents`


class SampleMethod:
    """Independent i1 proposals in batches (the paper's Sample); with ESOpt each
    batch is one ES generation, one batch slot per perturbed model."""

    def __init__(self, batch: int, perturbed: bool) -> None:
        self.name = "sample+esopt" if perturbed else "sample"
        self.batch = batch
        self.perturbed = perturbed

    def plan(self) -> Iterator[StepSpec]:
        return itertools.repeat(StepSpec("i1", self.batch, self.perturbed))

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        return []


class EohMethod:
    """EoH: an i1 initial population, then generations of e1, e2, m1, m2 (m3
    optional), survival of the best N after each operator. With ESOpt the
    operators in `perturbed_ops` (m1, m2 by default, as in the paper) draw each
    candidate from its own perturbed model, one ES update per such operator."""

    def __init__(self, init: int, offspring: int, operators: list[str], parent_count: int,
                 perturbed_ops: tuple[str, ...] = (), es_count: int = 0) -> None:
        self.name = "eoh+esopt" if perturbed_ops else "eoh"
        self.init = init
        self.offspring = offspring
        self.operators = list(operators)
        self.parent_count = parent_count
        self.perturbed_ops = tuple(perturbed_ops)
        self.es_count = es_count

    def plan(self) -> Iterator[StepSpec]:
        yield StepSpec("i1", self.init, False)
        while True:
            for op in self.operators:
                if op in self.perturbed_ops:
                    yield StepSpec(op, self.es_count, True)
                else:
                    yield StepSpec(op, self.offspring, False)

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        wanted = PARENT_COUNTS[operator]
        if wanted is None:
            wanted = self.parent_count
        return population.select(wanted, rng) if wanted else []


def make_method(config: RunConfig) -> Method:
    es_count = config.es.population * config.es.proposals_per_member
    method = config.run.method
    if method in ("sample", "sample+esopt"):
        perturbed = method == "sample+esopt"
        return SampleMethod(es_count if perturbed else config.sample.batch, perturbed)
    perturbed_ops = tuple(config.es.operators) if method == "eoh+esopt" else ()
    return EohMethod(init=config.eoh.init or config.eoh.population, offspring=config.eoh.offspring,
                     operators=config.eoh.operators, parent_count=config.eoh.parents,
                     perturbed_ops=perturbed_ops, es_count=es_count)


def members_for(count: int, per_member: int) -> int:
    """ES members that take part in a perturbed step of `count` candidates."""
    return math.ceil(count / per_member)


def planned_es_generations(method: Method, budget: int, per_member: int) -> int:
    """ES updates the plan makes before the budget runs out. A budget-cut last step
    still updates when at least two members proposed something."""
    generations = 0
    left = budget
    for spec in method.plan():
        if left <= 0:
            break
        granted = min(spec.count, left)
        left -= granted
        if spec.perturbed and members_for(granted, per_member) >= 2:
            generations += 1
    return generations
