"""EoH: an i1 initial population, then generations of e1, e2, m1, m2 (m3
optional, any registered operator), survival of the best N after each step.
With +ESOpt the operators in es.operators (m1, m2 by default, as in the
paper) draw each candidate from its own perturbed model, one ES update per
such step. eoh.generations > 0 ends the plan after that many generations."""

from __future__ import annotations

import itertools
from typing import Any, Iterator

from coevolve.base.config import config_error
from coevolve.search import operators
from coevolve.search.methods import Method, StepSpec, parse_name
from coevolve.search.runconfig import EohSection, require_step_fits


def m_multiplier(config) -> float:
    """The paper's k for this run's budget: eoh.m_multiplier, or (0) the k that
    spends the budget T over eoh.generations generations of e1, e2 (offspring
    each) and m1, m2 (k * offspring each)."""
    eoh = config.eoh
    if eoh.m_multiplier > 0:
        return eoh.m_multiplier
    k = config.run.budget / (2 * eoh.offspring * eoh.generations) - 1
    if k <= 0:
        raise config_error("eoh.m_multiplier", f"= 0 scales m1/m2 to the budget, but budget {config.run.budget} "
                           f"leaves no m1/m2 candidates over {eoh.generations} generations of "
                           f"{2 * eoh.offspring} e1/e2 candidates; raise the budget or set eoh.m_multiplier")
    return k


class EohMethod(Method):
    label = "EoH"
    section = "eoh"

    def setup(self) -> None:
        cfg = self.config
        eoh, es = cfg.eoh, cfg.es
        self.k = m_multiplier(cfg)
        self.init = eoh.init or eoh.population
        self.operators = list(eoh.operators)
        self.counts = {op: max(1, round(eoh.offspring * self.k)) if operators.get(op).scaled else eoh.offspring
                       for op in self.operators}
        self.perturbed_ops = tuple(es.operators) if self.perturbed else ()
        es_count = es.population * es.proposals_per_member  # 0: as the plan's step
        self.perturbed_counts = {op: es_count for op in self.perturbed_ops} if es_count else {}
        self.generations = eoh.generations

    @classmethod
    def check(cls, config: Any) -> None:
        """Each step's size against run.budget (require_step_fits), named by the key that sizes it."""
        eoh, es = config.eoh, config.es
        defaults = EohSection()
        if eoh.init_in_budget:  # (charged outside T, it is capped by EohSection's bound alone)
            require_step_fits(config, "eoh.init" if eoh.init else "eoh.population", eoh.init or eoh.population,
                              eoh.init or eoh.population, "the initial i1 step" + (
                                  "" if eoh.init else " (eoh.init = 0: eoh.population candidates)"),
                              defaults.population)
        # es.population sizes the perturbed steps in place of eoh's keys (0: they keep the plan's count)
        perturbed = set(es.operators) if parse_name(config.run.method).esopt and es.population else set()
        for op in eoh.operators:
            if op in perturbed:
                require_step_fits(config, "es.population", es.population, es.population * es.proposals_per_member,
                                  f"one perturbed {op} step (es.population x es.proposals_per_member)",
                                  defaults.offspring, es.proposals_per_member)
            elif not operators.get(op).scaled:
                require_step_fits(config, "eoh.offspring", eoh.offspring, eoh.offspring, f"one {op} step",
                                  defaults.offspring)
            elif eoh.m_multiplier > 0:  # 0 sizes the step from the budget: it always fits
                asked = max(1, round(eoh.offspring * eoh.m_multiplier))
                raised = eoh.m_multiplier > defaults.m_multiplier  # else eoh.offspring alone is too large
                require_step_fits(config, "eoh.m_multiplier" if raised else "eoh.offspring",
                                  eoh.m_multiplier if raised else eoh.offspring, asked,
                                  f"one {op} step (eoh.offspring x eoh.m_multiplier)", defaults.offspring,
                                  eoh.offspring if raised else eoh.m_multiplier)

    def steps(self) -> Iterator[StepSpec]:
        yield StepSpec("i1", self.init, False, 0)
        for generation in itertools.count(1):
            if self.generations and generation > self.generations:
                return
            for op in self.operators:
                if op in self.perturbed_ops:
                    yield StepSpec(op, self.perturbed_counts.get(op, self.counts[op]), True, generation)
                else:
                    yield StepSpec(op, self.counts[op], False, generation)

    def outside_budget(self) -> int:
        return 0 if self.config.eoh.init_in_budget else self.init

    def plan_notes(self) -> dict:
        return {"m_multiplier": self.k}

    def budget_scaled(self) -> dict[str, int]:
        # what k sizes, not k itself: a budget whose k rounds to the same steps replays them as they were
        scaled = [op for op in self.operators if operators.get(op).scaled]
        if self.config.eoh.m_multiplier > 0 or not scaled:
            return {}
        return {f"eoh.m_multiplier = 0 ({', '.join(scaled)} candidates per step from run.budget)":
                self.counts[scaled[0]]}
