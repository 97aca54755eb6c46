"""Sample: independent i1 proposals in batches (the paper's Sample). With
+ESOpt each batch is one ES generation, one batch slot per perturbed model."""

from __future__ import annotations

import itertools
from typing import Any, Iterator

import numpy as np

from coevolve.search.methods import Method, StepSpec, parse_name
from coevolve.search.population import Candidate, Population
from coevolve.search.reward import paper_sample_rewards
from coevolve.search.runconfig import SampleSection, require_step_fits


class SampleMethod(Method):
    label = "Sample"
    unit = "batch"
    section = "sample"

    def setup(self) -> None:
        es = self.config.es
        es_count = es.population * es.proposals_per_member  # 0: as the plan's step
        self.batch = es_count if self.perturbed and es_count else self.config.sample.batch

    @classmethod
    def check(cls, config: Any) -> None:
        """A batch against run.budget (require_step_fits), named by the key that sizes it."""
        es, default = config.es, SampleSection().batch
        if parse_name(config.run.method).esopt and es.population:  # es.population sizes the batch in its place
            require_step_fits(config, "es.population", es.population, es.population * es.proposals_per_member,
                              "one perturbed batch (es.population x es.proposals_per_member)", default,
                              es.proposals_per_member)
        else:
            require_step_fits(config, "sample.batch", config.sample.batch, config.sample.batch, "one batch", default)

    def steps(self) -> Iterator[StepSpec]:
        return (StepSpec("i1", self.batch, self.perturbed, n) for n in itertools.count(1))

    def population_size(self) -> int:
        return self.config.sample.population

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        return []

    def paper_rewards(self, objectives: list[float | None], parents: list[list[Candidate]], floor: float) -> list[float]:
        return paper_sample_rewards(objectives, self.direction)
