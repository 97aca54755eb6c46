"""Sample: independent i1 proposals in batches (the paper's Sample). With
+ESOpt each batch is one ES generation, one batch slot per perturbed model."""

from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from coevolve.search.methods import Method, StepSpec
from coevolve.search.population import Candidate, Population
from coevolve.search.reward import paper_sample_rewards


class SampleMethod(Method):
    label = "Sample"
    unit = "batch"
    section = "sample"

    def setup(self) -> None:
        es = self.config.es
        es_count = es.population * es.proposals_per_member  # 0: as the plan's step
        self.batch = es_count if self.perturbed and es_count else self.config.sample.batch

    def steps(self) -> Iterator[StepSpec]:
        return (StepSpec("i1", self.batch, self.perturbed, n) for n in itertools.count(1))

    def population_size(self) -> int:
        return self.config.sample.population

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        return []

    def paper_rewards(self, objectives: list[float | None], parents: list[list[Candidate]], floor: float) -> list[float]:
        return paper_sample_rewards(objectives, self.direction)
