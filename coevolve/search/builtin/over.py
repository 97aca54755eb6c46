"""The shared part of the archive methods that run another method's plan
(islands, MAP-Elites): `[section] over` names the inner method (EoH or
Sample), whose steps, parent rule, budget rule and paper reward they use
on their own archive."""

from __future__ import annotations

from typing import Any, Iterator

from coevolve.search.methods import Method, MethodName, StepSpec, method_class
from coevolve.search.population import Candidate


class OverMethod(Method):
    def setup(self) -> None:
        self.opts = self.settings()
        self.inner = method_class(self.opts.over)(self.config, MethodName(self.opts.over, esopt=self.perturbed))
        self.unit = self.inner.unit

    def steps(self) -> Iterator[StepSpec]:
        return self.inner.steps()

    def outside_budget(self) -> int:
        return self.inner.outside_budget()

    def budget_scaled(self) -> dict[str, Any]:
        return self.inner.budget_scaled()  # the inner plan's (EoH's m_multiplier = 0) are this method's too

    def start(self, task: Any) -> None:
        super().start(task)
        self.inner.start(task)
        self.inner.members = self.members  # the inner reward's reference: this archive's programs

    def paper_rewards(self, objectives: list[float | None], parents: list[list[Candidate]], floor: float) -> list[float]:
        return self.inner.paper_rewards(objectives, parents, floor)
